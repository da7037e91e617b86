"""The arithmetic of ``crossfeed bench --only dr`` (crossfeed/bench/dr_figures.py), its
summary lines and chart (report_dr.py, chart_dr.py)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from crossfeed.bench import chart, chart_dr, report_dr
from crossfeed.bench.dr_figures import (
    Moved,
    elapsed,
    failover_run,
    lost,
    section,
    steps,
    switchover_run,
)

pytestmark = pytest.mark.unit


def test_elapsed_is_none_when_an_end_is_missing_or_comes_first():
    assert elapsed(10.0, 12.3456) == 2.346
    assert elapsed(10.0, None) is None
    assert elapsed(None, 12.0) is None
    assert elapsed(12.0, 10.0) is None


def test_a_transfer_is_lost_when_the_new_primary_lacks_it():
    assert lost([1, 2, 3, 4], [1, 2]) == 2
    assert lost([1, 2], [1, 2, 3]) == 0
    # The new primary's sequence handed out 3 again (the old primary's 3 never arrived):
    # the application's own transfer 3 there is not the lost one.
    assert lost([1, 2, 3], [1, 2, 3], written_there=[3]) == 1


def _moved(**changes: object) -> Moved:
    fields: dict[str, object] = {
        "command_at": 100.0,
        "returned_at": 101.5,
        "refused_at": 99.0,
        "first_commit_at": 101.6,
        "committed": (1, 2, 3, 4),
        "held": frozenset({1, 2, 5}),
        "written_there": frozenset({5}),
        "writing_s": 2.0,
    }
    fields.update(changes)
    return Moved(**fields)  # type: ignore[arg-type]


def test_a_failover_is_timed_from_its_command_and_from_the_first_refused_write():
    run = failover_run(_moved())
    assert run == {
        "writable_s": 1.6,
        "app_waited_s": 2.6,
        "command_s": 1.5,
        "app_lost": 2,
        "app_committed": 4,
        "transfers_per_s": 2.0,
    }
    assert failover_run(_moved(first_commit_at=None))["writable_s"] is None


def test_a_switchover_is_timed_from_the_first_refused_write_to_the_first_committed_one():
    run = switchover_run(_moved(refused_at=100.2, held=frozenset({1, 2, 3, 4, 5})))
    assert run["unavailable_s"] == 1.4
    assert run["command_s"] == 1.5
    assert run["refused_before_command_s"] is None  # refused during the command
    assert run["app_lost"] == 0


def _failover(writable: float, lost_: int, rpo: int | None = None) -> dict[str, object]:
    run: dict[str, object] = {"writable_s": writable, "command_s": writable - 0.1}
    run["app_lost"] = lost_
    if rpo is not None:
        run["rpo_reported"] = rpo
    return run


RUNS = {
    "failover": {
        "crossfeed": [_failover(2.0, 50, 40), _failover(3.0, 60, 60), _failover(1.0, 10, 9)],
        "crossfeed_dc_a_lost": [_failover(7.0, 50, 30)],
        "native": [_failover(0.5, 5), {"error": "RuntimeError: boom\ntrace"}, _failover(0.2, 2)],
    },
    "switchover": {
        "crossfeed": [{"unavailable_s": 4.0, "writes_refused_s": 3.0, "app_lost": 0}],
        "native": [{"unavailable_s": 2.0, "app_lost": 0}],
    },
}


def test_the_section_gives_each_figure_over_the_repetitions_that_produced_it():
    out = section(RUNS)
    crossfeed = out["failover"]["crossfeed"]
    assert crossfeed["writable_s"] == {"min": 1.0, "median": 2.0, "max": 3.0, "n": 3}
    assert crossfeed["rpo_reported"]["median"] == 40.0
    assert crossfeed["repetitions"] == 3 and crossfeed["failed"] == 0
    native = out["failover"]["native"]
    assert native["failed"] == 1 and native["writable_s"]["n"] == 2
    assert "rpo_reported" not in native
    assert len(native["runs"]) == 3
    # Repetition by repetition, a failed one left out: 2.0/0.5 and 1.0/0.2.
    assert out["failover"]["crossfeed_of_native"] == {"min": 4.0, "median": 4.5, "max": 5.0, "n": 2}
    assert out["failover"]["crossfeed_dc_a_lost_of_native"]["median"] == 14.0
    assert out["switchover"]["crossfeed_of_native"]["median"] == 2.0
    assert "crossfeed_dc_a_lost" not in out["switchover"]
    assert out["switchover"]["crossfeed"]["writes_refused_s"]["median"] == 3.0


def test_each_step_runs_from_the_mark_before_it():
    assert steps(10.0, [("freeze", 10.25), ("drain", 11.0), ("reverse", 11.5)]) == {
        "freeze": 0.25,
        "drain": 0.75,
        "reverse": 0.5,
    }
    assert steps(10.0, []) == {}


def test_an_empty_run_gives_no_figures():
    out = section({})
    assert out["failover"]["crossfeed"] == {"repetitions": 0, "failed": 0, "runs": []}
    assert out["switchover"]["crossfeed_of_native"] is None


def test_the_summary_and_the_chart_show_both_scenarios_on_both_sides():
    dr = {"available": True, "repetitions": 3, **section(RUNS)}
    text = "\n".join(report_dr.lines(dr))
    assert "by hand, PostgreSQL logical replication: 0.35 [0.20–0.50] s" in text
    assert "crossfeed: 2.00 [1.00–3.00] s (the command alone 1.90 [0.90–2.90] s; RPO" in text
    assert "RPO reported 40 [9–60]" in text
    assert "1 of 3 failed (RuntimeError: boom)" in text
    assert "the report's writes_refused_s 3.00 [3.00–3.00]" in text
    assert "crossfeed / by hand: 4.50 [4.00–5.00]" in text
    assert "crossfeed, dc-a's broker killed too: 7.00 [7.00–7.00] s" in text
    assert len(chart_dr.panels(dr)) == 3
    assert chart_dr.notes(dr) == [
        "disaster recovery, failover by hand, PostgreSQL logical replication: 1 of 3 "
        "repetitions failed"
    ]
    fig = chart.figure({"dr": dr, "machine": {}, "versions": {}})
    assert [ax.get_title() for ax in fig.axes] == [
        "database failover, seconds (3 repetitions)",
        "database switchover, seconds (3 repetitions)",
        "failover: source transactions lost",
    ]
    plt.close(fig)


def test_a_part_not_run_says_so():
    missing = {"available": False, "reason": "not run (--only)"}
    assert report_dr.lines(missing) == ["disaster recovery: not available — not run (--only)"]
    assert chart_dr.panels(missing) == []
