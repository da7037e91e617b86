"""What the demo shows while it runs: a live table in a terminal, plain lines otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable
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


def _rows(counts: tuple[int, int] | None) -> str:
    return "-" if counts is None else f"{counts[0]:,} / {counts[1]:,}"


def _cdc_row(update: dict[str, Any]) -> list[str]:
    """The CDC demo's row: a captured PostgreSQL database into another one."""
    status = update.get("status") or {}
    return [
        f"{update.get('elapsed', 0):.0f} s",
        str(status.get("state", "starting")),
        _ts(status.get("consistency_ts_us")),
        _rows(update.get("source")),
        _rows(update.get("target")),
        f"{update.get('samples', 0):,} ({update.get('torn', 0)} torn)",
    ]


CDC_HEADERS = [
    "elapsed",
    "feed state",
    "consistency_ts",
    "source accounts / transfers",
    "target accounts / transfers",
    "samples",
]


def _pair_row(update: dict[str, Any]) -> list[str]:
    """The active-active demo's row: both directions, both databases."""
    directions = update.get("directions") or [{}, {}]
    sides = update.get("sides") or [None, None]
    conflicts = update.get("conflicts") or [0, 0]
    return [
        f"{update.get('elapsed', 0):.0f} s",
        *(f"{d.get('state', 'starting')} {_ts(d.get('consistency_ts_us'))}" for d in directions),
        *(_rows(counts) for counts in sides),
        f"{conflicts[0]:,} / {conflicts[1]:,}",
        f"{update.get('samples', 0):,} ({update.get('torn', 0)} torn)",
    ]


PAIR_HEADERS = [
    "elapsed",
    "dc-a -> dc-b (consistency_ts)",
    "dc-b -> dc-a (consistency_ts)",
    "dc-a accounts / transfers",
    "dc-b accounts / transfers",
    "conflicts lost on a / b",
    "samples",
]

# view -> (headers, row, title)
VIEWS: dict[str, tuple[list[str], Callable[[dict[str, Any]], list[str]], str]] = {
    "mirror": (HEADERS, _row, "crossfeed demo: dc-a -> dc-b"),
    "ordered": (ORDERED_HEADERS, _ordered_row, "crossfeed demo: ordered feed dc-a -> PostgreSQL"),
    "cdc": (CDC_HEADERS, _cdc_row, "crossfeed demo: PostgreSQL -> Debezium -> PostgreSQL"),
    "active-active": (PAIR_HEADERS, _pair_row, "crossfeed demo: PostgreSQL <-> PostgreSQL"),
}


class Display:
    def __init__(self, tty: bool, *, view: str = "mirror") -> None:
        self.console = Console()
        self.tty = tty and self.console.is_terminal
        self.live: Live | None = None
        self.headers, self.row, self.title = VIEWS[view]

    def say(self, line: str) -> None:
        if self.live is not None:
            self.live.console.print(line, highlight=False)
        else:
            self.console.print(line, highlight=False, soft_wrap=True)

    def progress(self, update: dict[str, Any]) -> None:
        if not self.tty:
            # One line per update, never wrapped: a log or a file reads it as one record.
            self.console.print(
                "  ".join(f"{h}: {v}" for h, v in zip(self.headers, self.row(update), strict=True)),
                highlight=False,
                soft_wrap=True,
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
