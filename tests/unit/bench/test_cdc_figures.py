"""The arithmetic of ``crossfeed bench --only cdc`` (crossfeed/bench/cdc_figures.py)."""

from __future__ import annotations

import pytest

from crossfeed.bench.cdc_figures import (
    LagBook,
    apply_rate,
    capture_rate,
    cpu_per_row,
    goals,
    half_load,
)

pytestmark = pytest.mark.unit


def test_apply_rate_counts_three_rows_per_transfer_between_first_and_last_seen():
    rate = apply_rate(1000, first_at=10.0, last_at=12.0)
    assert rate == {"seconds": 2.0, "rows_per_s": 1500.0, "transactions_per_s": 500.0}


def test_apply_rate_of_a_backlog_seen_whole_at_once_is_finite():
    assert apply_rate(10, 5.0, 5.0)["rows_per_s"] == 30_000.0


def test_half_load_is_half_the_transactions_of_the_rows_applied_and_at_least_one():
    assert half_load(3000.0) == 500.0
    assert half_load(0.0) == 1.0


def test_lag_book_counts_each_row_once_and_only_the_lag_phase():
    book = LagBook(after_id=100)
    assert book.add([(99, 0.0), (101, 10.0), (102, 10.5)], seen_at=11.0) == 2
    # The next poll sees them again (ids above the floor), and a late commit below.
    assert book.add([(101, 10.0), (102, 10.5), (103, 10.9)], seen_at=11.2) == 1
    assert sorted(book.lags_ms) == pytest.approx([300.0, 500.0, 1000.0])
    assert book.summary()["rows"] == 3


def test_lag_book_floor_trails_the_highest_id_by_its_window_and_never_drops_below_start():
    book = LagBook(after_id=10, window=5)
    assert book.floor == 10
    book.add([(30, 1.0)], seen_at=1.0)
    assert book.floor == 25


def test_lag_book_clamps_a_clock_read_before_the_row_was_stamped_to_zero():
    book = LagBook()
    book.add([(1, 2.0)], seen_at=1.999)
    assert book.lags_ms == [0.0]


def test_goals_judge_crossfeed_against_native_and_the_lag_bound():
    crossfeed = {"rows_per_s": 600.0, "lag": {"lag_ms": {"p50": 300.0, "p99": 2500.0}}}
    verdict = goals(crossfeed, {"rows_per_s": 1000.0})
    assert verdict["of_native"] == 0.6
    assert verdict["of_native_met"] is True
    assert verdict["lag_p99_met"] is False


def test_goals_of_a_failed_side_are_unknown_not_failed():
    verdict = goals({"error": "boom"}, {"rows_per_s": 1000.0})
    assert verdict["of_native"] is None
    assert verdict["of_native_met"] is None
    assert verdict["lag_p99_met"] is None


def test_capture_rate_is_the_backlogs_rows_over_writing_and_publishing():
    assert capture_rate(1000, 10.0) == {"capture_rows_per_s": 300.0}


def test_lag_book_tells_a_growing_lag_from_a_flat_one():
    book = LagBook()
    book.add([(i, 0.0) for i in range(1, 9)], seen_at=0.1)
    book.add([(i, 0.0) for i in range(9, 17)], seen_at=2.0)
    summary = book.summary()
    assert summary["p50_first_quarter_ms"] == 100.0
    assert summary["p50_last_quarter_ms"] == 2000.0
    assert LagBook().summary()["p50_first_quarter_ms"] is None


def test_cpu_per_row_is_the_apply_windows_cpu_over_the_rows():
    cost = {"puller": {"cpu_window_s": 1.5, "cpu_s": 9.0}, "sink": {"cpu_window_s": 0.5}}
    found = cpu_per_row(cost, transfers=1000)  # 3,000 rows
    assert found["cpu_ms_per_row_by_process"] == {"puller": 0.5, "sink": 0.1667}
    assert found["cpu_ms_per_row"] == pytest.approx(0.6667)
