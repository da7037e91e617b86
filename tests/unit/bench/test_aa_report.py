"""The active-active part's summary lines and chart panels (crossfeed/bench/report_aa.py,
chart_aa.py)."""

from __future__ import annotations

import pytest

from crossfeed.bench import chart_aa, report_aa

pytestmark = pytest.mark.unit


def _lag(p50: float, p99: float) -> dict:
    return {"lag_ms": {"p50": p50, "p99": p99}, "rows": 300, "offered_transfers_per_s": 10.0}


SECTION = {
    "available": True,
    "accounts": 200,
    "sessions_per_side": 4,
    "capture": {"capture_rows_per_s": 3000.0},
    "rate_transfers_per_s": 500.0,
    "rate_asked": "half of Debezium's",
    "lag_seconds": 15.0,
    "reference": {
        "lag": {"a-to-b": _lag(400.0, 900.0)},
        "cpu_us_per_change": {"a-to-b": {"total": 800.0, "with_connect": 1000.0}},
        "databases": {"equal": True, "totals_kept": True},
    },
    "active_active": {
        "lag": {"a-to-b": _lag(500.0, 1200.0), "b-to-a": _lag(450.0, 1000.0)},
        "cpu_us_per_change": {
            "a-to-b": {"total": 900.0, "with_connect": 1100.0},
            "processes": {"a-to-b sink": 120.0},
        },
        "conflicts_per_s": {"a-to-b": {"lost": 2.0, "won": 1.0, "handled": 3.0}},
        "databases": {"equal": True, "totals_kept": True},
    },
    "ratios": {
        "goal": 1.2,
        "a-to-b": {"lag_p50": 1.25, "lag_p99": 1.33, "cpu_per_change": 1.13, "met": False},
        "b-to-a": {"lag_p50": 1.13, "lag_p99": 1.11, "met": None},
        "met": None,
    },
}


def test_the_summary_gives_both_phases_each_direction_and_the_verdict():
    text = "\n".join(report_aa.lines(SECTION))
    assert (
        "Debezium published 3,000 rows/s; each direction at 500.0 transfers/s (half of Debezium's)"
        in text
    )
    assert "a-to-b: lag p50 400 ms, p99 900 ms" in text
    assert "b-to-a: lag p50 450 ms, p99 1,000 ms" in text
    assert "conflicts/s 3.0 (lost 2.0, won 1.0)" in text
    assert "a-to-b sink 120" in text
    assert "a-to-b against the reference: lag p50 1.25x, p99 1.33x, CPU per change 1.13x" in text
    assert "goal (each ratio ≤ 1.2, both directions): None" in text


def test_a_part_not_run_or_failed_says_so():
    assert report_aa.lines({"available": False, "reason": "not run (--only)"}) == [
        "active-active: not available — not run (--only)"
    ]
    failed = {"available": True, "error": "RuntimeError: no connector\nlogs"}
    assert "  FAILED: RuntimeError: no connector" in report_aa.lines(failed)
    assert chart_aa.panels(failed) == []
    assert chart_aa.notes(failed) == ["active-active: failed — RuntimeError: no connector"]


def test_the_chart_draws_the_reference_and_both_directions():
    assert [(b[0], b[1]) for b in chart_aa.measured(SECTION)] == [
        ("reference", "a-to-b"),
        ("active_active", "a-to-b"),
        ("active_active", "b-to-a"),
    ]
    assert len(chart_aa.panels(SECTION)) == 2
    assert "goal ≤ 1.2: None" in chart_aa.notes(SECTION)[0]
