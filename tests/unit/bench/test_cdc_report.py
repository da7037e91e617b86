"""The CDC part's summary lines and chart panels (crossfeed/bench/report_cdc.py,
chart_cdc.py)."""

from __future__ import annotations

import pytest

from crossfeed.bench import chart_cdc, report_cdc

pytestmark = pytest.mark.unit


CDC = {
    "available": True,
    "transfers": 1000,
    "sessions": 4,
    "native": {
        "rows_per_s": 9000.0,
        "lag": {"lag_ms": {"p50": 20.0, "p99": 40.0}},
        "peak_rss_mb": {"walsender": 30.0, "apply worker": 0.0},
        "torn_samples": 0,
    },
    "crossfeed": {"error": "RuntimeError: 10 of 1000 ledger rows visible\nmore"},
    "goals": {"of_native": None},
}


def test_the_chart_draws_only_a_side_that_measured_and_notes_the_failed_one():
    assert [s[0] for s in chart_cdc.measured(CDC)] == ["native"]
    assert len(chart_cdc.panels(CDC)) == 3
    assert chart_cdc.notes(CDC) == [
        "CDC, crossfeed (JSON): failed — RuntimeError: 10 of 1000 ledger rows visible"
    ]
    assert chart_cdc.panels({"available": False, "reason": "not run (--only)"}) == []


def test_the_chart_notes_torn_samples():
    torn = {**CDC, "crossfeed": {"rows_per_s": 1.0, "torn_samples": 2}}
    assert chart_cdc.notes(torn) == ["CDC, crossfeed (JSON): 2 TORN SAMPLES on the target"]


def test_the_summary_names_both_sides_and_the_goals():
    text = "\n".join(report_cdc.lines(CDC))
    assert "PostgreSQL logical replication: 9,000 rows/s" in text
    assert "p99 40 ms" in text
    assert "crossfeed (Debezium, JSON): failed: RuntimeError: 10 of 1000" in text
    assert "goals: crossfeed at n/a of native" in text
    assert "Avro" not in text  # a result without that side


def test_the_summary_shows_both_formats_bytes_per_event_and_cpu_per_row():
    both = {
        **CDC,
        "crossfeed": {"rows_per_s": 3000.0, "cpu_ms_per_row": 0.5, "bytes_per_event": {"t": 2034}},
        "crossfeed_avro": {
            "rows_per_s": 4000.0,
            "cpu_ms_per_row": 0.25,
            "bytes_per_event": {"accounts": 141.0, "transfers": 180.0},
        },
    }
    text = "\n".join(report_cdc.lines(both))
    assert "crossfeed (Debezium, Avro): 4,000 rows/s" in text
    assert "CPU 0.250 ms per row applied; bytes per event: accounts 141, transfers 180" in text
    assert "CPU 0.500 ms per row applied; bytes per event: t 2,034" in text
    assert [s[0] for s in chart_cdc.measured(both)] == ["native", "crossfeed", "crossfeed_avro"]
