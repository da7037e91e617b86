"""The arithmetic of ``crossfeed bench --only active_active``
(crossfeed/bench/aa_figures.py)."""

from __future__ import annotations

import pytest

from crossfeed.bench.aa_figures import (
    conflict_rates,
    conflicts_of,
    cpu_per_change,
    direction_of,
    ratios,
)

pytestmark = pytest.mark.unit


def test_a_label_belongs_to_its_direction_or_is_shared():
    assert direction_of("a-to-b sorter") == "a-to-b"
    assert direction_of("b-to-a sink") == "b-to-a"
    assert direction_of("dc-a broker") is None
    assert direction_of("postgres-a") is None


def test_a_direction_pays_its_own_processes_and_a_share_of_the_shared_ones():
    cpu_s = {
        "a-to-b puller": 1.0,
        "a-to-b sink": 1.0,
        "b-to-a puller": 3.0,
        "dc-a broker": 2.0,
        "postgres-a": 2.0,
        "connect-a (Debezium)": 4.0,
    }
    out = cpu_per_change(cpu_s, {"a-to-b": 1000, "b-to-a": 1000})
    # Own: 2 s over 1,000 changes; shared: 4 s over both directions' 2,000 changes.
    assert out["a-to-b"] == {
        "own": 2000.0,
        "shared": 2000.0,
        "total": 4000.0,
        "with_connect": 6000.0,
    }
    assert out["b-to-a"]["total"] == 5000.0
    assert out["processes"]["a-to-b puller"] == 1000.0
    assert out["processes"]["dc-a broker"] == 1000.0
    assert out["processes"]["connect-a (Debezium)"] == 2000.0


def test_one_direction_carries_the_shared_processes_alone():
    out = cpu_per_change({"a-to-b sink": 1.0, "dc-b broker": 1.0}, {"a-to-b": 500})
    assert out["a-to-b"]["total"] == 4000.0
    assert "b-to-a" not in out


def test_no_change_gives_no_figure_rather_than_a_division_by_zero():
    out = cpu_per_change({"a-to-b sink": 1.0, "dc-b broker": 1.0}, {"a-to-b": 0})
    assert out["processes"] == {"a-to-b sink": None, "dc-b broker": None}
    assert "a-to-b" not in out


METRICS = """\
# HELP crossfeed_sink_conflicts_total Active-active: replicated changes that met a newer write
# TYPE crossfeed_sink_conflicts_total counter
crossfeed_sink_conflicts_total{feed="p-a-to-b",outcome="lost"} 12.0
crossfeed_sink_conflicts_total{outcome="won",feed="p-a-to-b"} 3.0
crossfeed_sink_conflicts_total{feed="other",outcome="lost"} 99.0
crossfeed_sink_conflicts_created{feed="p-a-to-b",outcome="lost"} 1.7e9
"""


def test_conflicts_are_read_for_the_feed_by_outcome_whatever_the_label_order():
    assert conflicts_of(METRICS, "p-a-to-b") == {"lost": 12.0, "won": 3.0}
    assert conflicts_of(METRICS, "nothing") == {}


def test_conflict_rates_are_the_phase_increase_per_second_and_the_sinks_sum():
    rates = conflict_rates(
        {"lost": 10.0, "recorded": 10.0}, {"lost": 30.0, "won": 5.0, "recorded": 30.0}, 10.0
    )
    # The recorded rows are the lost ones again: not added to what the sink handled.
    assert rates == {"lost": 2.0, "won": 0.5, "recorded": 2.0, "handled": 2.5}


def _phase(lags: dict[str, tuple[float, float]], cpu: dict[str, float]) -> dict:
    return {
        "lag": {d: {"lag_ms": {"p50": p50, "p99": p99}} for d, (p50, p99) in lags.items()},
        "cpu_us_per_change": {d: {"total": c, "with_connect": c * 2} for d, c in cpu.items()},
    }


def test_each_direction_is_judged_against_the_one_direction_reference():
    reference = _phase({"a-to-b": (100.0, 200.0)}, {"a-to-b": 1000.0})
    active = _phase(
        {"a-to-b": (110.0, 240.0), "b-to-a": (150.0, 200.0)},
        {"a-to-b": 1100.0, "b-to-a": 1000.0},
    )
    out = ratios(reference, active)
    assert out["a-to-b"]["lag_p50"] == 1.1
    assert out["a-to-b"]["lag_p99"] == 1.2
    assert out["a-to-b"]["cpu_per_change"] == 1.1
    assert out["a-to-b"]["cpu_per_change_with_connect"] == 1.1
    assert out["a-to-b"]["met"] is True  # 1.2 is within the goal
    assert out["b-to-a"]["lag_p50"] == 1.5
    assert out["b-to-a"]["met"] is False
    assert out["met"] is False


def test_a_missing_figure_leaves_the_verdict_open():
    reference = _phase({"a-to-b": (100.0, 200.0)}, {"a-to-b": 1000.0})
    active = _phase({"a-to-b": (100.0, 200.0)}, {"a-to-b": 1000.0})
    out = ratios(reference, active)
    assert out["a-to-b"]["met"] is True
    assert out["b-to-a"]["met"] is None
    assert out["met"] is None
