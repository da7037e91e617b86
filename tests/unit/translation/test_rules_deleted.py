"""Rule 0 of crossfeed.translation.rules: a group position in records the source deleted
before they were copied (retention or DeleteRecords while the pullers were away).

The property tests build a model partition — holes (markers, aborted or compacted
records) and records the feed copies — whose puller copied a prefix, stopped, found the
log start moved past its position and copied on from the log start (a puller gap); then
every committed offset is translated knowing the log start.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.core.gaps import Gap, key_of
from crossfeed.core.offset_ranges import OffsetSyncIndex, OffsetSyncWriter
from crossfeed.core.partitions import TopicPartition
from crossfeed.translation.rules import LogStart, Method, Outcome, decide, deleted
from crossfeed.translation.scan import Kind, RangeScan, Seen, summarize

pytestmark = pytest.mark.unit

TP = TopicPartition("orders.eu", 3)


def lost(first: int, end: int) -> Gap:
    return Gap(TP, first, end)


@dataclass
class Deleted:
    """A source partition with a log start, what its puller copied, and the fake I/O."""

    copyable: list[bool]
    """Per source offset: a record the feed copies (else a hole)."""
    log_start: int
    copies: dict[int, int]
    """Copied source offset -> offset of its copy on the target."""
    index: OffsetSyncIndex

    def scan(self, start: int, end: int, limit: int) -> RangeScan | None:
        # The source serves nothing below its log start.
        first = max(start, self.log_start)
        stop = max(first, min(end, len(self.copyable)))
        seen = [
            Seen(o, Kind.COPYABLE, timestamp_ms=o) for o in range(first, stop) if self.copyable[o]
        ][:limit]
        scanned_to = end if len(seen) < limit else seen[-1].offset + 1
        return summarize(start, end, max(scanned_to, start), seen)

    def by_timestamp(self, timestamp_ms: int) -> int | None:
        return None

    def translate(self, offset: int, policy: str = "continue", acked: bool = False) -> Outcome:
        found = self.index.translate(offset) if len(self.index) else None
        log = LogStart(TP, self.log_start, self.index.next_copied(offset), policy, acked)
        return decide(offset, found, None, self, log)

    def frontier(self) -> int:
        runs = self.index.runs()
        return runs[-1].target_end + 1


def _copy(copyable: list[bool], offsets: list[int], commit_every: list[bool]) -> Deleted:
    writer = OffsetSyncWriter()
    runs = []
    copies: dict[int, int] = {}
    target = 0
    for n, offset in enumerate(offsets):
        copies[offset] = target
        writer.add(offset, target)
        target += 1
        if commit_every[n % len(commit_every)]:  # a commit: runs end, a marker takes an offset
            runs.extend(writer.flush())
            target += 1
    runs.extend(writer.flush())
    return Deleted(copyable, 0, copies, OffsetSyncIndex(runs))


@st.composite
def deletions(draw: st.DrawFn) -> Deleted:
    """Up to 60 offsets; the puller copied those before ``stopped``; the log start then
    moved to ``log_start`` (maybe not past ``stopped``), and the puller copied on from
    ``max(stopped, log_start)`` up to ``copied_to``."""
    copyable = draw(st.lists(st.booleans(), min_size=1, max_size=60))
    size = len(copyable)
    stopped = draw(st.integers(0, size))
    log_start = draw(st.integers(0, size))
    resumed = max(stopped, log_start)
    copied_to = draw(st.integers(resumed, size))
    offsets = [o for o in range(size) if copyable[o] and (o < stopped or resumed <= o < copied_to)]
    commits = draw(st.lists(st.booleans(), min_size=1, max_size=4))
    model = _copy(copyable, offsets, commits)
    model.log_start = log_start
    return model


@settings(max_examples=300)
@given(deletions(), st.data())
def test_a_position_in_deleted_records_is_reported_exactly_when_the_target_lacks_them(
    model: Deleted, data: st.DataObject
) -> None:
    size = len(model.copyable)
    offset = data.draw(st.integers(0, size + 1))
    outcome = model.translate(offset)
    start = model.log_start
    runs = model.index.runs()
    copied_between = [o for o in range(offset, start) if o in model.copies]
    if not runs or offset >= start or copied_between:
        # The target holds what the group reads next (a copy of the record at the offset,
        # or of one below the log start after it: the offsets between were holes when
        # copied), or nothing is known: no rule 0.
        assert outcome.lost is None and outcome.method is not Method.SOURCE_DELETED
        return
    assert outcome.lost == lost(offset, start)
    assert outcome.method is Method.SOURCE_DELETED and not outcome.exact and not outcome.held
    # It resumes at the first copy at or after the log start, else where the next goes.
    after = sorted(o for o in model.copies if o >= start)
    expected = model.copies[after[0]] if after else model.frontier()
    assert outcome.target_offset == expected
    assert all(model.copies[o] >= expected for o in model.copies if o >= offset)


@settings(max_examples=200)
@given(deletions(), st.data())
def test_rule_0_changes_nothing_else_and_stop_holds_until_acknowledged(
    model: Deleted, data: st.DataObject
) -> None:
    offset = data.draw(st.integers(0, len(model.copyable) + 1))
    found = model.index.translate(offset) if len(model.index) else None
    plain = decide(offset, found, None, model)
    with_start = model.translate(offset)
    if with_start.lost is None:
        assert with_start == plain
    stopped = model.translate(offset, policy="stop")
    acked = model.translate(offset, policy="stop", acked=True)
    assert stopped.held == (with_start.lost is not None)
    assert not acked.held and not with_start.held
    # Held or not, the outcome says where the group would go: the same place.
    assert stopped.target_offset == acked.target_offset == with_start.target_offset
    assert stopped.lost == acked.lost == with_start.lost


# --- examples: the integration test's partition -------------------------------------------


def _gap_model(copied_to: int = 300) -> Deleted:
    """Offsets 0-99 copied (one transaction), 100-149 deleted before they were copied,
    150 on copied (another transaction): target 0-99, a marker at 100, then 101 on."""
    copies = {**{o: o for o in range(100)}, **{o: o - 49 for o in range(150, copied_to)}}
    writer = OffsetSyncWriter()
    runs = []
    for source, target in sorted(copies.items()):
        writer.add(source, target)
    runs = writer.flush()
    return Deleted([True] * 300, 150, copies, OffsetSyncIndex(runs))


def test_a_group_inside_the_gap_resumes_at_the_copy_of_the_log_start() -> None:
    outcome = _gap_model().translate(120)
    assert outcome == Outcome(101, Method.SOURCE_DELETED, False, 0, lost=lost(120, 150))
    assert outcome.lost is not None and (outcome.lost.count, outcome.lost.last) == (30, 149)
    assert outcome.lost.key == "orders.eu/3@120"  # what ack-gap takes


def test_with_gap_policy_stop_the_group_is_held_until_its_position_is_acknowledged() -> None:
    model = _gap_model()
    assert model.translate(120, policy="stop").held
    assert not model.translate(120, policy="stop", acked=True).held
    assert key_of(TP, 120) == "orders.eu/3@120"


def test_a_group_caught_up_with_the_copies_when_the_records_after_were_deleted() -> None:
    model = _gap_model(copied_to=150)  # the puller has not copied past the gap yet
    outcome = model.translate(100)
    assert (outcome.target_offset, outcome.method, outcome.lost) == (
        100,
        Method.SOURCE_DELETED,
        lost(100, 150),
    )


def test_a_group_past_the_copies_counts_what_it_consumed_and_what_was_deleted() -> None:
    model = _gap_model(copied_to=150)
    outcome = model.translate(120)
    # It consumed 100-119 on the source (never copied), and 120-149 are gone.
    assert (outcome.target_offset, outcome.gap, outcome.lost) == (100, 20, lost(120, 150))


def test_a_group_whose_record_was_copied_is_exact_though_the_source_deleted_it() -> None:
    outcome = _gap_model().translate(40)
    assert (outcome.target_offset, outcome.method, outcome.exact, outcome.lost) == (
        40,
        Method.OFFSET_SYNC,
        True,
        None,
    )


def test_a_marker_below_the_log_start_followed_by_copies_is_not_a_deletion() -> None:
    # 0-4 copied, a commit marker at 5, 6-9 copied; retention then deleted up to 8.
    model = _copy([*[True] * 5, False, *[True] * 4], [0, 1, 2, 3, 4, 6, 7, 8, 9], [False])
    model.log_start = 8
    outcome = model.translate(5)
    assert (outcome.method, outcome.exact, outcome.lost) == (Method.OFFSET_SYNC, True, None)


def test_an_unknown_or_older_log_start_changes_nothing() -> None:
    model = _gap_model()
    found = model.index.translate(120)
    plain = decide(120, found, None, model)
    assert plain.method is Method.OFFSET_SYNC and plain.exact  # a hole, as far as it knows
    assert decide(120, found, None, model, LogStart(TP, 100, 150)) == plain
    assert deleted(120, found, LogStart(TP, 150, None)) is None  # next copy unknown: not claimed
