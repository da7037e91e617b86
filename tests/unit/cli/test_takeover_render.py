"""crossfeed/cli/takeover_render.py: an ordered feed's failover report as people read it."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from crossfeed.cli.takeover_render import is_ordered, ordered_failover_report, primary_line

REPORT: dict[str, Any] = {
    "kind": "ordered",
    "feed": "replica",
    "source": "dc-a",
    "target": "postgresql://crossfeed@db-b:5432/app?schema=replica",
    "stopped_by": "operator",
    "source_reachable": False,
    "consistency_ts_us": 1_767_323_045_123_456,
    "last_txn": "771.24023448",
    "last_commit_ts_us": 1_767_323_045_000_000,
    "rpo": {
        "transactions": 42,
        "exact": False,
        "known_from": "the feed's copies on dc-b",
        "first_lost_us": 1_767_323_045_200_000,
        "last_lost_us": 1_767_323_047_123_456,
        "span_s": 2.0,
        "text": "at least 42 source transactions, 2.000s of source time (known from ...)",
    },
    "epoch": 3,
    "failed_over_at_ms": 1_767_323_100_000,
    "sinks_ended": 1,
    "fenced_tasks": 1,
    "notes": ["dc-a does not answer"],
}


def rendered(report: dict[str, Any]) -> str:
    console = Console(width=200, record=True, force_terminal=False)
    for part in ordered_failover_report(report):
        console.print(part)
    return console.export_text()


def test_the_report_says_what_the_target_holds_and_what_was_lost() -> None:
    text = rendered(REPORT)
    assert "is the primary now" in text and "fencing epoch 3" in text
    assert "consistency_ts: 2026-01-02 03:04:05.123456 UTC (1767323045123456)" in text
    assert "last source transaction applied: 771.24023448" in text
    assert "RPO: at least 42 source transactions" in text
    assert "lost commits from 2026-01-02 03:04:05.200000 UTC to 2026-01-02 03:04:07.123456" in text
    assert "note: dc-a does not answer" in text


def test_nothing_lost_prints_no_span_and_the_primary_line_reads_the_kept_report() -> None:
    none_lost = {**REPORT, "rpo": {**REPORT["rpo"], "transactions": 0, "first_lost_us": None}}
    assert "lost commits" not in rendered(none_lost)
    line = primary_line(REPORT)
    assert line.startswith("the target, since 2026-01-02 03:05:00.000000 UTC (failover epoch 3)")
    assert "as of 2026-01-02 03:04:05.123456 UTC; lost: at least 42" in line
    assert is_ordered(REPORT) and not is_ordered({"feed": "orders", "groups": []})
