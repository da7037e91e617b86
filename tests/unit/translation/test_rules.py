"""Unit and property tests for crossfeed.translation.rules (and scan summaries).

The property tests build a model source partition — holes (markers, aborted or compacted
records), records the feed copies, and copies of target records — replicate a prefix of
it through a transactional sink model, and check that every committed offset translates
to the copy of the next record the group would read: zero re-reads, zero skips.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.core.offset_ranges import OffsetSyncIndex, OffsetSyncWriter
from crossfeed.translation.rules import ConsumerStamp, Method, Outcome, decide
from crossfeed.translation.scan import Kind, RangeScan, Seen, summarize

pytestmark = pytest.mark.unit

HOLE, COPY, TARGET = "hole", "copy", "target"


@dataclass
class Model:
    """A source partition, what was replicated of it, and the fake I/O over it."""

    kinds: list[str]
    """Kind of each source offset."""
    originals: dict[int, int]
    """Source offset of a target copy -> offset of its original on the target."""
    copies: dict[int, int]
    """Replicated source offset -> offset of its copy on the target."""
    index: OffsetSyncIndex
    timestamps: dict[int, int]
    """Target offset -> record timestamp (ms), for timestamp lookups."""
    scan_limit_cap: int = 1_000_000
    reachable: bool = True

    def scan(self, start: int, end: int, limit: int) -> RangeScan | None:
        if not self.reachable:
            return None
        seen: list[Seen] = []
        stop = min(end, len(self.kinds))
        scanned_to = end if stop == len(self.kinds) else stop
        for offset in range(start, stop):
            kind = self.kinds[offset]
            if kind == HOLE:
                continue
            if len(seen) >= min(limit, self.scan_limit_cap):
                scanned_to = offset
                break
            if kind == COPY:
                seen.append(Seen(offset, Kind.COPYABLE, timestamp_ms=offset))
            else:
                seen.append(Seen(offset, Kind.TARGET_COPY, self.originals[offset]))
        else:
            scanned_to = max(scanned_to, start)
        return summarize(start, end, max(scanned_to, start), seen)

    def by_timestamp(self, timestamp_ms: int) -> int | None:
        later = [t for t, ts in self.timestamps.items() if ts >= timestamp_ms]
        return min(later) if later else (max(self.timestamps, default=-1) + 1)


@st.composite
def models(draw: st.DrawFn, with_target_copies: bool = False) -> Model:
    """A partition of up to 60 offsets; a prefix of its copyable records replicated in
    transactions (each commit leaves a marker on the target); maybe the oldest runs lost."""
    choices = [HOLE, COPY, COPY, COPY] + ([TARGET] if with_target_copies else [])
    kinds = draw(st.lists(st.sampled_from(choices), min_size=0, max_size=60))
    originals: dict[int, int] = {}
    original = draw(st.integers(0, 5))
    for offset, kind in enumerate(kinds):
        if kind == TARGET:
            originals[offset] = original
            original += draw(st.integers(1, 3))
    copyable = [o for o, k in enumerate(kinds) if k == COPY]
    replicated = copyable[: draw(st.integers(0, len(copyable)))]
    writer = OffsetSyncWriter()
    runs = []
    target = original + draw(st.integers(0, 5))  # copies land after the originals
    copies: dict[int, int] = {}
    for offset in replicated:
        copies[offset] = target
        writer.add(offset, target)
        target += 1
        if draw(st.integers(0, 3)) == 0:  # a commit: runs end, a marker takes an offset
            runs.extend(writer.flush())
            target += 1
    runs.extend(writer.flush())
    lost = draw(st.integers(0, len(runs))) if draw(st.booleans()) else 0
    index = OffsetSyncIndex(runs[lost:])
    timestamps = {t: s for s, t in copies.items()}  # the source offset doubles as the time
    return Model(kinds, originals, copies, index, timestamps)


def _next_record(model: Model, offset: int) -> int | None:
    """The first record at or after ``offset`` that the group would read (not a hole)."""
    for o in range(offset, len(model.kinds)):
        if model.kinds[o] != HOLE:
            return o
    return None


def _translate(model: Model, offset: int, stamp: ConsumerStamp | None = None) -> Outcome:
    found = model.index.translate(offset) if len(model.index) else None
    return decide(offset, found, stamp, model)


@settings(max_examples=200)
@given(models(), st.data())
def test_exact_translation_is_the_copy_of_the_next_record(
    model: Model, data: st.DataObject
) -> None:
    offset = data.draw(st.integers(0, len(model.kinds) + 2))
    outcome = _translate(model, offset)
    nxt = _next_record(model, offset)
    runs = model.index.runs()
    if outcome.exact:
        assert outcome.gap == 0
        if nxt is not None and nxt in model.copies:
            assert outcome.target_offset == model.copies[nxt]
        else:
            # Nothing replicated follows: resume right after the last copy.
            assert runs and outcome.target_offset == runs[-1].target_end + 1
            before = range(min(offset, len(model.kinds)))
            assert all(model.kinds[o] != COPY or o in model.copies for o in before)
    if nxt is not None and nxt in model.copies and runs and nxt >= runs[0].source_start:
        # The next record's copy is covered by a known run: always exact.
        assert outcome.exact and outcome.target_offset == model.copies[nxt]


@settings(max_examples=200)
@given(models(), st.data())
def test_past_the_frontier_resumes_at_the_frontier_and_counts_the_gap(
    model: Model, data: st.DataObject
) -> None:
    runs = model.index.runs()
    if not runs:
        return
    frontier = runs[-1].source_end + 1
    offset = data.draw(st.integers(frontier, len(model.kinds) + 2))
    outcome = _translate(model, offset)
    assert outcome.target_offset == runs[-1].target_end + 1
    missing = sum(
        1 for o in range(frontier, min(offset, len(model.kinds))) if model.kinds[o] == COPY
    )
    assert outcome.exact == (missing == 0)
    assert outcome.gap == missing
    assert outcome.method is (Method.OFFSET_SYNC if missing == 0 else Method.FRONTIER)


@settings(max_examples=200)
@given(models(with_target_copies=True), st.data())
def test_a_target_copy_ahead_resumes_at_its_original(model: Model, data: st.DataObject) -> None:
    offset = data.draw(st.integers(0, len(model.kinds)))
    outcome = _translate(model, offset)
    nxt = _next_record(model, offset)
    found = model.index.translate(offset) if len(model.index) else None
    if (
        nxt is not None
        and model.kinds[nxt] == TARGET
        and (found is None or found.kind.value == "before-first")
    ):
        assert outcome.method is Method.HEADER and outcome.exact
        assert outcome.target_offset == model.originals[nxt]


@given(models())
def test_unreachable_source_never_claims_more_than_the_index_knows(model: Model) -> None:
    model.reachable = False
    for offset in range(len(model.kinds) + 2):
        outcome = _translate(model, offset)
        found = model.index.translate(offset) if len(model.index) else None
        if found is None:
            assert outcome.method is Method.NONE and outcome.target_offset is None
        elif found.exact:
            assert outcome.exact and outcome.target_offset == found.target_offset
        else:
            assert not outcome.exact and outcome.target_offset == found.target_offset
            assert outcome.gap == found.gap


# --- examples -------------------------------------------------------------------------------


def _model(
    kinds: str,
    copies: dict[int, int],
    runs_from: int = 0,
    originals: dict[int, int] | None = None,
) -> Model:
    """``kinds``: one letter per offset, ``.`` hole, ``c`` copyable, ``t`` target copy."""
    names = {".": HOLE, "c": COPY, "t": TARGET}
    writer = OffsetSyncWriter()
    runs = []
    for s, t in sorted(copies.items()):
        writer.add(s, t)
    runs = writer.flush()
    return Model(
        [names[k] for k in kinds],
        originals or {},
        copies,
        OffsetSyncIndex(runs[runs_from:]),
        {t: s for s, t in copies.items()},
    )


def test_caught_up_behind_a_transaction_marker_is_exact() -> None:
    # Source: records 0-2, a commit marker at 3. Copies at target 10-12.
    model = _model("ccc.", {0: 10, 1: 11, 2: 12})
    outcome = _translate(model, 4)
    assert (outcome.target_offset, outcome.method, outcome.exact, outcome.gap) == (
        13,
        Method.OFFSET_SYNC,
        True,
        0,
    )


def test_frontier_counts_records_not_offsets() -> None:
    model = _model("cc.c.c", {0: 0, 1: 1})
    outcome = _translate(model, 6)
    assert (outcome.target_offset, outcome.method, outcome.exact, outcome.gap) == (
        2,
        Method.FRONTIER,
        False,
        2,
    )


def test_frontier_gap_is_an_upper_bound_when_not_all_could_be_read() -> None:
    model = _model("cc" + "c" * 10, {0: 0, 1: 1})
    model.scan_limit_cap = 3
    outcome = _translate(model, 12)
    assert outcome.method is Method.FRONTIER and outcome.gap == 10  # 3 read + 7 unread offsets


def test_frontier_without_the_source_counts_offsets() -> None:
    model = _model("cc.c.c", {0: 0, 1: 1})
    model.reachable = False
    outcome = _translate(model, 6)
    assert (outcome.method, outcome.gap) == (Method.FRONTIER, 4)


def test_before_first_over_compacted_holes_is_exact() -> None:
    model = _model("....cc", {4: 20, 5: 21})
    outcome = _translate(model, 1)
    assert (outcome.target_offset, outcome.method, outcome.exact) == (20, Method.OFFSET_SYNC, True)


def test_lost_runs_fall_back_to_the_consumer_timestamp() -> None:
    model = _model("cccc", {0: 0, 1: 1, 2: 3, 3: 4}, runs_from=1)  # the first run is lost
    stamp = ConsumerStamp(committed_offset=1, timestamp_ms=0, committed_at_ms=5)
    outcome = _translate(model, 1, stamp)
    # The copy with timestamp >= that of the last consumed record: read again (at least once).
    assert (outcome.target_offset, outcome.method, outcome.exact, outcome.gap) == (
        0,
        Method.TIMESTAMP,
        False,
        -1,
    )
    without = _translate(model, 1)
    assert (without.target_offset, without.method, without.exact) == (3, Method.BEFORE_FIRST, False)


def test_a_stamp_past_the_committed_offset_is_not_used() -> None:
    model = _model("cccc", {0: 0, 1: 1, 2: 3, 3: 4}, runs_from=1)
    stamp = ConsumerStamp(committed_offset=3, timestamp_ms=2, committed_at_ms=5)
    assert _translate(model, 1, stamp).method is Method.BEFORE_FIRST


def test_no_runs_and_a_target_copy_at_the_end_resumes_after_its_original() -> None:
    # After a failback: the old standby holds only copies of the old primary's records.
    model = _model("tt.t", {}, originals={0: 7, 1: 8, 3: 9})
    assert _translate(model, 1).target_offset == 8
    end = _translate(model, 4)
    assert (end.target_offset, end.method, end.exact) == (10, Method.HEADER, True)


def test_nothing_known_gives_no_offset() -> None:
    model = _model("cc", {})
    outcome = _translate(model, 1)
    assert (outcome.target_offset, outcome.method, outcome.exact) == (None, Method.NONE, False)


def test_negative_offsets_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        decide(-1, None, None, _model("", {}))


def test_summarize_checks_order_and_bounds() -> None:
    scan = summarize(5, 10, 8, [Seen(5, Kind.COPYABLE, timestamp_ms=3), Seen(7, Kind.OTHER)])
    assert (scan.copyable, scan.complete, scan.copyable_bound, scan.newest_copyable_ts_ms) == (
        1,
        False,
        3,
        3,
    )
    assert summarize(5, 10, 10, []).empty
    with pytest.raises(ValueError, match="outside"):
        summarize(5, 10, 8, [Seen(9, Kind.COPYABLE)])
    with pytest.raises(ValueError, match="order"):
        summarize(0, 10, 10, [Seen(3, Kind.COPYABLE), Seen(3, Kind.COPYABLE)])
