"""The failover report of an ordered feed (REST JSON in): what the target holds, what
was lost (docs/disaster-recovery.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from rich.console import RenderableType
from rich.text import Text


def ts_text(us: int | None) -> str:
    if not us or us <= 0:
        return "-"
    return datetime.fromtimestamp(us / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S.%f UTC")


def is_ordered(report: Mapping[str, Any]) -> bool:
    return report.get("kind") == "ordered"


def primary_line(report: Mapping[str, Any]) -> str:
    """One line for ``changefeed get``: the target is the primary, since when, holding what."""
    rpo = report["rpo"]
    return (
        f"the target, since {ts_text(report['failed_over_at_ms'] * 1000)} (failover epoch "
        f"{report['epoch']}); it holds the source as of {ts_text(report['consistency_ts_us'])}; "
        f"lost: {rpo['text']}"
    )


def ordered_failover_report(report: Mapping[str, Any]) -> Iterator[RenderableType]:
    rpo = report["rpo"]
    yield Text(
        f"feed {report['feed']} failed over: {report['target']} is the primary now "
        f"(stopped by the {report['stopped_by']}; {report['sinks_ended']} sink session(s) "
        f"ended, fencing epoch {report['epoch']}; {report['fenced_tasks']} puller task(s) "
        "fenced)",
        style="bold",
    )
    yield Text(
        f"consistency_ts: {ts_text(report['consistency_ts_us'])} "
        f"({report['consistency_ts_us']}): the target holds the source's state exactly as "
        "of that commit"
    )
    yield Text(
        f"last source transaction applied: {report['last_txn'] or '-'} "
        f"(commit_ts {report['last_commit_ts_us']})"
    )
    lost = rpo["transactions"]
    yield Text(
        f"RPO: {rpo['text']}", style="red" if lost else ("green" if rpo["exact"] else "yellow")
    )
    if rpo["first_lost_us"]:
        yield Text(
            f"lost commits from {ts_text(rpo['first_lost_us'])} to {ts_text(rpo['last_lost_us'])}"
        )
    for note in report["notes"]:
        yield Text(f"note: {note}", style="dim")
