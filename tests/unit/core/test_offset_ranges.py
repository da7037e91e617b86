"""Unit and property tests for crossfeed.core.offset_ranges."""

from __future__ import annotations

import bisect
import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.offset_ranges import (
    OffsetRun,
    OffsetSyncIndex,
    OffsetSyncWriter,
    Translation,
    TranslationKind,
    merge_runs,
)

pytestmark = pytest.mark.unit


# --- a model of a transactional sink ------------------------------------------------------


@st.composite
def sink_histories(draw: st.DrawFn) -> tuple[list[list[tuple[int, int]]], dict[int, int]]:
    """Transactions of (source, target) delivery reports as a transactional sink sees them.

    Source offsets increase with gaps (compaction, aborted or filtered records); target
    offsets are contiguous inside a transaction; each commit writes a control marker; other
    producers may write in between.
    """
    source = draw(st.integers(0, 50))
    target = draw(st.integers(0, 50))
    transactions: list[list[tuple[int, int]]] = []
    for _ in range(draw(st.integers(0, 6))):
        reports: list[tuple[int, int]] = []
        for _ in range(draw(st.integers(1, 8))):
            source += draw(st.sampled_from([1, 1, 1, 2, 5]))
            target += 1 + draw(st.sampled_from([0, 0, 0, 0, 3]))  # foreign writes
            reports.append((source, target))
        target += 1  # the commit marker
        transactions.append(reports)
    mapping = {s: t for reports in transactions for s, t in reports}
    return transactions, mapping


def _runs_of(transactions: list[list[tuple[int, int]]]) -> list[OffsetRun]:
    writer = OffsetSyncWriter()
    runs: list[OffsetRun] = []
    for reports in transactions:
        for s, t in reports:
            writer.add(s, t)
        runs.extend(writer.flush())
    return runs


def _expected(mapping: dict[int, int], offset: int) -> Translation | None:
    """The translation rules computed straight from the replicated records."""
    if not mapping:
        return None
    sources = sorted(mapping)
    if offset in mapping:
        return Translation(mapping[offset], TranslationKind.COVERED)
    if offset < sources[0]:
        return Translation(mapping[sources[0]], TranslationKind.BEFORE_FIRST, sources[0] - offset)
    if offset == sources[-1] + 1:
        return Translation(mapping[sources[-1]] + 1, TranslationKind.CAUGHT_UP)
    if offset > sources[-1]:
        return Translation(
            mapping[sources[-1]] + 1, TranslationKind.FRONTIER, offset - sources[-1] - 1
        )
    following = sources[bisect.bisect_right(sources, offset)]
    return Translation(mapping[following], TranslationKind.AFTER_GAP)


# --- OffsetRun ----------------------------------------------------------------------------


class TestOffsetRun:
    def test_target_end_and_translate(self) -> None:
        run = OffsetRun(10, 14, 100)
        assert run.target_end == 104
        assert run.length == 5
        assert run.translate(10) == 100
        assert run.translate(14) == 104
        assert run.translate(9) is None
        assert run.translate(15) is None

    def test_single_record(self) -> None:
        run = OffsetRun(7, 7, 3)
        assert run.target_end == 3
        assert run.translate(7) == 3

    @pytest.mark.parametrize(("s", "e", "t"), [(-1, 0, 0), (0, 0, -1), (5, 4, 0)])
    def test_rejects_invalid(self, s: int, e: int, t: int) -> None:
        with pytest.raises(ValueError):
            OffsetRun(s, e, t)

    def test_continued_by(self) -> None:
        run = OffsetRun(0, 4, 10)
        assert run.continued_by(OffsetRun(5, 9, 15))
        assert not run.continued_by(OffsetRun(5, 9, 16))  # target jump (marker)
        assert not run.continued_by(OffsetRun(6, 9, 15))  # source gap


# --- OffsetSyncWriter ---------------------------------------------------------------------


class TestOffsetSyncWriter:
    def test_extends_while_both_sides_advance_by_one(self) -> None:
        writer = OffsetSyncWriter()
        for i in range(5):
            writer.add(10 + i, 100 + i)
        assert writer.take_closed_runs() == []
        assert writer.open_run == OffsetRun(10, 14, 100)
        assert writer.flush() == [OffsetRun(10, 14, 100)]
        assert writer.open_run is None

    def test_source_gap_starts_new_run(self) -> None:
        writer = OffsetSyncWriter()
        writer.add(0, 0)
        writer.add(1, 1)
        writer.add(3, 2)  # offset 2 compacted / aborted / filtered
        assert writer.take_closed_runs() == [OffsetRun(0, 1, 0)]
        assert writer.flush() == [OffsetRun(3, 3, 2)]

    def test_target_jump_starts_new_run(self) -> None:
        writer = OffsetSyncWriter()
        writer.add(0, 0)
        writer.add(1, 2)  # offset 1 on the target is a commit marker
        assert writer.flush() == [OffsetRun(0, 0, 0), OffsetRun(1, 1, 2)]

    def test_closed_runs_handed_over_once(self) -> None:
        writer = OffsetSyncWriter()
        writer.add(0, 0)
        writer.add(5, 5)
        assert writer.take_closed_runs() == [OffsetRun(0, 0, 0)]
        assert writer.take_closed_runs() == []
        assert writer.flush() == [OffsetRun(5, 5, 5)]
        assert writer.flush() == []

    def test_transaction_marker_breaks_run_at_every_commit(self) -> None:
        writer = OffsetSyncWriter()
        writer.add(0, 0)
        writer.add(1, 1)
        assert writer.flush() == [OffsetRun(0, 1, 0)]
        # commit marker at target offset 2: the next transaction starts at 3
        writer.add(2, 3)
        writer.add(3, 4)
        assert writer.flush() == [OffsetRun(2, 3, 3)]

    def test_piece_after_flush_is_mergeable_when_contiguous(self) -> None:
        writer = OffsetSyncWriter()
        writer.add(0, 0)
        first = writer.flush()
        writer.add(1, 1)  # non-transactional: no marker in between
        second = writer.flush()
        assert first == [OffsetRun(0, 0, 0)]
        assert second == [OffsetRun(1, 1, 1)]
        assert merge_runs(first + second) == [OffsetRun(0, 1, 0)]

    @pytest.mark.parametrize("report", [(5, 20), (4, 21), (6, 10), (6, 20)])
    def test_rejects_reports_that_do_not_increase(self, report: tuple[int, int]) -> None:
        writer = OffsetSyncWriter()
        writer.add(5, 20)
        with pytest.raises(ValueError, match="must both increase"):
            writer.add(*report)

    def test_ordering_check_survives_flush(self) -> None:
        writer = OffsetSyncWriter()
        writer.add(5, 20)
        writer.flush()
        with pytest.raises(ValueError):
            writer.add(4, 30)

    def test_abort_forgets_untaken_runs_and_restarts(self) -> None:
        writer = OffsetSyncWriter()
        writer.add(5, 20)
        writer.add(7, 21)
        writer.abort()
        assert writer.open_run is None
        assert writer.take_closed_runs() == []
        writer.add(5, 23)  # retried after the abort marker
        assert writer.flush() == [OffsetRun(5, 5, 23)]

    def test_rejects_negative(self) -> None:
        with pytest.raises(ValueError):
            OffsetSyncWriter().add(-1, 0)


@given(sink_histories())
def test_writer_runs_reproduce_every_delivery_report(
    history: tuple[list[list[tuple[int, int]]], dict[int, int]],
) -> None:
    transactions, mapping = history
    runs = _runs_of(transactions)
    translated = {
        s: run.translate(s) for run in runs for s in range(run.source_start, run.source_end + 1)
    }
    assert translated == mapping
    # a run never spans a commit: the marker always breaks target contiguity
    boundaries = [reports[-1][0] for reports in transactions]
    for run in runs:
        assert not any(run.source_start <= b < run.source_end for b in boundaries)
    # runs are maximal: neighbours are never contiguous on both sides
    for a, b in itertools.pairwise(runs):
        assert not a.continued_by(b)


@given(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 3)), max_size=30), st.data())
def test_flushed_pieces_merge_into_unflushed_runs(
    steps: list[tuple[int, int]], data: st.DataObject
) -> None:
    reports = []
    s = t = 0
    for ds, dt in steps:
        s, t = s + ds, t + dt
        reports.append((s, t))
    whole = OffsetSyncWriter()
    pieces = OffsetSyncWriter()
    flushed: list[OffsetRun] = []
    for report in reports:
        whole.add(*report)
        pieces.add(*report)
        if data.draw(st.booleans()):
            flushed.extend(pieces.flush())
    flushed.extend(pieces.flush())
    assert merge_runs(flushed) == whole.flush()


# --- merge_runs ---------------------------------------------------------------------------


class TestMergeRuns:
    def test_sorts_and_merges_contiguous(self) -> None:
        runs = [OffsetRun(5, 9, 105), OffsetRun(0, 4, 100), OffsetRun(12, 12, 110)]
        assert merge_runs(runs) == [OffsetRun(0, 9, 100), OffsetRun(12, 12, 110)]

    def test_merges_duplicates_and_consistent_overlaps(self) -> None:
        runs = [OffsetRun(0, 4, 10), OffsetRun(0, 4, 10), OffsetRun(3, 8, 13)]
        assert merge_runs(runs) == [OffsetRun(0, 8, 10)]

    def test_keeps_runs_apart_at_a_target_jump(self) -> None:
        runs = [OffsetRun(0, 4, 10), OffsetRun(5, 9, 16)]
        assert merge_runs(runs) == runs

    def test_contradicting_overlap_raises(self) -> None:
        with pytest.raises(ValueError, match="contradicting"):
            merge_runs([OffsetRun(0, 4, 10), OffsetRun(3, 5, 50)])

    def test_target_going_backwards_raises(self) -> None:
        with pytest.raises(ValueError, match="contradicting"):
            merge_runs([OffsetRun(0, 4, 10), OffsetRun(6, 7, 12)])

    def test_empty(self) -> None:
        assert merge_runs([]) == []


# --- OffsetSyncIndex: the rules -----------------------------------------------------------


@pytest.fixture
def index() -> OffsetSyncIndex:
    # source 10..14 -> 100..104; 15..16 were not copied; 17..19 -> 106..108
    return OffsetSyncIndex([OffsetRun(10, 14, 100), OffsetRun(17, 19, 106)])


class TestTranslateRules:
    def test_rule1_no_runs(self) -> None:
        assert OffsetSyncIndex().translate(5) is None

    @pytest.mark.parametrize(("offset", "target"), [(10, 100), (12, 102), (14, 104), (19, 108)])
    def test_rule2_covered_is_exact(self, index: OffsetSyncIndex, offset: int, target: int) -> None:
        result = index.translate(offset)
        assert result == Translation(target, TranslationKind.COVERED)
        assert result.exact and not result.frontier and result.gap == 0

    @pytest.mark.parametrize("offset", [15, 16])
    def test_rule3_gap_resumes_at_next_replicated_record(
        self, index: OffsetSyncIndex, offset: int
    ) -> None:
        result = index.translate(offset)
        assert result == Translation(106, TranslationKind.AFTER_GAP)
        assert result.exact

    def test_rule4_caught_up(self, index: OffsetSyncIndex) -> None:
        result = index.translate(20)
        assert result == Translation(109, TranslationKind.CAUGHT_UP)
        assert result.exact and not result.frontier

    def test_rule5_frontier_counts_the_gap(self, index: OffsetSyncIndex) -> None:
        result = index.translate(25)
        assert result == Translation(109, TranslationKind.FRONTIER, gap=5)
        assert result is not None and result.frontier and not result.exact

    def test_rule6_before_first_run(self, index: OffsetSyncIndex) -> None:
        result = index.translate(4)
        assert result == Translation(100, TranslationKind.BEFORE_FIRST, gap=6)
        assert result is not None and not result.exact and not result.frontier

    def test_source_contiguous_runs_across_a_marker(self) -> None:
        idx = OffsetSyncIndex([OffsetRun(0, 4, 0), OffsetRun(5, 9, 6)])
        assert len(idx) == 2
        assert idx.translate(5) == Translation(6, TranslationKind.COVERED)
        assert idx.translate(4) == Translation(4, TranslationKind.COVERED)

    def test_rejects_negative(self, index: OffsetSyncIndex) -> None:
        with pytest.raises(ValueError):
            index.translate(-1)


@given(sink_histories(), st.integers(0, 400))
def test_translation_matches_the_rules_on_replicated_records(
    history: tuple[list[list[tuple[int, int]]], dict[int, int]], offset: int
) -> None:
    transactions, mapping = history
    index = OffsetSyncIndex(_runs_of(transactions))
    index.check()
    assert index.translate(offset) == _expected(mapping, offset)


@given(sink_histories(), st.randoms(use_true_random=False))
def test_index_is_independent_of_add_order_for_consistent_runs(
    history: tuple[list[list[tuple[int, int]]], dict[int, int]], rnd: random.Random
) -> None:
    transactions, _ = history
    runs = _runs_of(transactions)
    # split some runs into pieces and add duplicates, as a re-read topic would deliver
    pieces = []
    for run in runs:
        middle = (run.source_start + run.source_end) // 2
        pieces.append(OffsetRun(run.source_start, middle, run.target_start))
        if middle < run.source_end:
            pieces.append(OffsetRun(middle + 1, run.source_end, run.translate(middle + 1) or 0))
        pieces.append(run)
    shuffled = list(pieces)
    rnd.shuffle(shuffled)
    index = OffsetSyncIndex(shuffled)
    index.check()
    assert index.runs() == merge_runs(runs) == runs


# --- OffsetSyncIndex: newest wins ---------------------------------------------------------


class TestNewestWins:
    def test_contradicting_overlap_replaces_old_run(self) -> None:
        idx = OffsetSyncIndex([OffsetRun(0, 9, 100)])
        idx.add(OffsetRun(5, 14, 500))  # e.g. the target topic was recreated
        assert idx.runs() == [OffsetRun(5, 14, 500)]

    def test_target_order_violation_drops_old_run(self) -> None:
        idx = OffsetSyncIndex([OffsetRun(0, 4, 100), OffsetRun(20, 24, 200)])
        idx.add(OffsetRun(10, 14, 50))
        assert idx.runs() == [OffsetRun(10, 14, 50), OffsetRun(20, 24, 200)]
        idx.add(OffsetRun(30, 30, 150))
        assert idx.runs() == [OffsetRun(10, 14, 50), OffsetRun(30, 30, 150)]

    def test_agreeing_runs_merge_through_the_new_one(self) -> None:
        idx = OffsetSyncIndex([OffsetRun(0, 4, 0), OffsetRun(10, 14, 10)])
        idx.add(OffsetRun(5, 9, 5))
        assert idx.runs() == [OffsetRun(0, 14, 0)]

    def test_neighbour_touching_on_one_side_only_survives(self) -> None:
        idx = OffsetSyncIndex([OffsetRun(0, 4, 0)])
        idx.add(OffsetRun(5, 9, 7))  # source contiguous, target jumped
        idx.add(OffsetRun(12, 13, 12))  # target contiguous, source gap
        assert idx.runs() == [OffsetRun(0, 4, 0), OffsetRun(5, 9, 7), OffsetRun(12, 13, 12)]


runs_strategy = st.builds(
    lambda s, n, t: OffsetRun(s, s + n, t),
    st.integers(0, 60),
    st.integers(0, 8),
    st.integers(0, 60),
)


@given(st.lists(runs_strategy, max_size=25))
def test_invariants_hold_and_newest_run_always_wins(runs: list[OffsetRun]) -> None:
    index = OffsetSyncIndex()
    for run in runs:
        before = index.runs()
        index.add(run)
        index.check()
        for s in range(run.source_start, run.source_end + 1):
            assert index.translate(s) == Translation(run.translate(s) or 0, TranslationKind.COVERED)
        # every surviving old offset keeps its old target (nothing is invented)
        for old in before:
            for s in range(old.source_start, old.source_end + 1):
                result = index.translate(s)
                assert result is not None
                if result.kind is TranslationKind.COVERED and run.translate(s) is None:
                    assert result.target_offset == old.translate(s)


def test_truncate_before() -> None:
    idx = OffsetSyncIndex([OffsetRun(0, 4, 0), OffsetRun(6, 9, 6), OffsetRun(12, 14, 12)])
    assert idx.truncate_before(6) == 1
    assert idx.runs() == [OffsetRun(6, 9, 6), OffsetRun(12, 14, 12)]
    assert idx.truncate_before(7) == 0  # a run reaching the cut stays
    assert idx.translate(2) == Translation(6, TranslationKind.BEFORE_FIRST, gap=4)
    assert idx.truncate_before(100) == 2
    assert idx.translate(2) is None


@st.composite
def blocks(draw: st.DrawFn) -> list[list[tuple[list[int], int]]]:
    """Transactions of blocks: source offsets (gaps possible) written at contiguous target
    offsets from a start (other writers and markers between blocks)."""
    source, target = -1, -1
    transactions = []
    for _ in range(draw(st.integers(1, 4))):
        txn = []
        for _ in range(draw(st.integers(1, 4))):
            offsets = []
            for _ in range(draw(st.integers(1, 6))):
                source += draw(st.sampled_from([1, 1, 1, 2, 5]))
                offsets.append(source)
            target += 1 + draw(st.sampled_from([0, 0, 2]))
            txn.append((offsets, target))
            target += len(offsets) - 1
        target += 1
        transactions.append(txn)
    return transactions


@given(blocks())
def test_add_block_is_add_of_each_record(transactions: list[list[tuple[list[int], int]]]) -> None:
    by_block, by_record = OffsetSyncWriter(), OffsetSyncWriter()
    for txn in transactions:
        for offsets, start in txn:
            by_block.add_block(offsets, start)
            for i, offset in enumerate(offsets):
                by_record.add(offset, start + i)
        assert by_block.flush() == by_record.flush()


def test_add_block_refuses_offsets_that_go_back() -> None:
    writer = OffsetSyncWriter()
    writer.add_block([10, 11, 12], 100)
    with pytest.raises(ValueError, match="must both increase"):
        writer.add_block([12, 13], 103)


@given(st.lists(st.integers(0, 50), max_size=12), st.integers(0, 60))
def test_next_copied_is_the_start_of_the_first_run_after_the_offset(
    offsets: list[int], probe: int
) -> None:
    index = OffsetSyncIndex(OffsetRun(o, o, 2 * o) for o in sorted(set(offsets)))
    later = [r.source_start for r in index.runs() if r.source_start > probe]
    assert index.next_copied(probe) == (min(later) if later else None)
