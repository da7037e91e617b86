"""What the demo shows while it runs: a live table in a terminal, plain lines otherwise."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.table import Table


def _ts(us: int | None) -> str:
    if not us:
        return "-"
    return time.strftime("%H:%M:%S", time.localtime(us / 1e6))


def _row(update: dict[str, Any]) -> list[str]:
    status = update.get("status") or {}
    lag = status.get("lag_s")
    return [
        f"{update.get('produced', 0):,}",
        f"{update.get('consumed', 0):,}",
        str(status.get("state", "starting")),
        "-" if lag is None else f"{lag:.1f} s",
        _ts(status.get("consistency_ts_us")),
    ]


HEADERS = ["produced on dc-a", "consumed on dc-a", "feed state", "lag", "consistency_ts"]


def _ordered_row(update: dict[str, Any]) -> list[str]:
    """The ordered demo's row: bank transfers into PostgreSQL."""
    status = update.get("status") or {}
    total = update.get("sum")
    return [
        f"{update.get('elapsed', 0):.0f} s",
        str(status.get("state", "starting")),
        _ts(status.get("consistency_ts_us")),
        _ts(status.get("syncpoint_ts_us")),
        "-" if total is None else f"{total:,}",
        f"{update.get('samples', 0):,} ({update.get('torn', 0)} torn)",
    ]


ORDERED_HEADERS = [
    "elapsed",
    "feed state",
    "consistency_ts",
    "syncpoint",
    "sum(balance) in PostgreSQL",
    "samples",
]


class Display:
    def __init__(self, tty: bool, *, ordered: bool = False) -> None:
        self.console = Console()
        self.tty = tty and self.console.is_terminal
        self.live: Live | None = None
        self.headers = ORDERED_HEADERS if ordered else HEADERS
        self.row = _ordered_row if ordered else _row
        self.title = (
            "crossfeed demo: ordered feed dc-a -> PostgreSQL"
            if ordered
            else "crossfeed demo: dc-a -> dc-b"
        )

    def say(self, line: str) -> None:
        if self.live is not None:
            self.live.console.print(line, highlight=False)
        else:
            self.console.print(line, highlight=False, soft_wrap=True)

    def progress(self, update: dict[str, Any]) -> None:
        if not self.tty:
            self.console.print(
                "  ".join(f"{h}: {v}" for h, v in zip(self.headers, self.row(update), strict=True)),
                highlight=False,
            )
            return
        table = Table(*self.headers, title=self.title)
        table.add_row(*self.row(update))
        if self.live is None:
            self.live = Live(table, console=self.console, refresh_per_second=4)
            self.live.start()
        else:
            self.live.update(table)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
