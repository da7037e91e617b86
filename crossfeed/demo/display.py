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


class Display:
    def __init__(self, tty: bool) -> None:
        self.console = Console()
        self.tty = tty and self.console.is_terminal
        self.live: Live | None = None

    def say(self, line: str) -> None:
        if self.live is not None:
            self.live.console.print(line, highlight=False)
        else:
            self.console.print(line, highlight=False, soft_wrap=True)

    def progress(self, update: dict[str, Any]) -> None:
        if not self.tty:
            self.console.print(
                "  ".join(f"{h}: {v}" for h, v in zip(HEADERS, _row(update), strict=True)),
                highlight=False,
            )
            return
        table = Table(*HEADERS, title="crossfeed demo: dc-a -> dc-b")
        table.add_row(*_row(update))
        if self.live is None:
            self.live = Live(table, console=self.console, refresh_per_second=4)
            self.live.start()
        else:
            self.live.update(table)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
