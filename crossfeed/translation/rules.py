"""The translation of one committed source offset (docs/design.md, guarantee 5).

Input: the offset ``O`` a group committed on a source partition ("the next record to
read is O"), what the feed's :class:`~crossfeed.core.offset_ranges.OffsetSyncIndex` for
that partition says about ``O`` (its ``translate(O)``, None without runs), the group's
consumer timestamp if the consumer wrapper wrote one, and
:class:`Lookups` — bounded reads of the source and a timestamp lookup on the target,
which answer None when the cluster cannot be asked (e.g. the source is down).

Rules, in order (each :class:`Outcome` names the one that applied):

0. The source no longer holds ``O``: the partition's log start offset ``L`` (as last
   known, :class:`LogStart`) is past it — retention or ``DeleteRecords`` — and the
   target has no copy of the record at ``O`` either: no run covers ``O``, and the first
   copy after ``O`` (the next run, the first run, or none yet) is of a record at or after
   ``L``, so the puller went past ``[O, L)`` without copying it. Then offsets ``O..L-1``
   are lost for the group (a :class:`~crossfeed.core.gaps.Gap` of the group: a count of
   offsets, transaction markers among them are not records) → ``source-deleted``, not
   exact. The group would resume at the copy of the first record after ``[O, L)`` that
   the target holds — the first copy at or after ``L``, or the target's end of the
   copies when there is none yet (whatever the puller copies next is at or after
   ``L``); where a run covers ``O`` or copies of
   records below ``L`` follow ``O``, the target holds what the group reads next and the
   other rules apply (a hole between runs below ``L`` was a hole when it was copied:
   transaction markers, aborted or compacted records). What then happens follows the
   feed's ``gap.policy``: ``continue`` moves the group there; ``stop`` holds it
   (``Outcome.held``: that group partition is not moved) until the position's key
   ``topic/partition@O`` is acknowledged (``gap.acknowledged``). A stale ``L`` is an
   older, lower log start: this rule may miss a deletion then, never invent one.
1. An offset sync covers ``O`` (rules 2–4 of :mod:`crossfeed.core.offset_ranges`) →
   ``offset-sync``, exact.
2. ``O`` is past the replicated frontier: if the source holds no copyable record between
   the frontier and ``O`` (only transaction markers, aborted or compacted records, or
   copies of target records), the group is caught up → ``offset-sync``, exact. Otherwise
   → ``frontier``: resume at the frontier, not exact; ``gap`` counts the copyable records
   the group consumed on the source that the target lacks (an upper bound in offsets when
   they could not all be read).
3. ``O`` is before every known run: if nothing at all lies between ``O`` and the first
   run → ``offset-sync``, exact (compaction emptied it).
4. No run covers ``O`` and the next record at ``O`` is itself a copy of a target record
   (after a failback the old standby holds such copies): resume at its original →
   ``header``, exact. At the very end of the source, a target copy just before ``O``
   means "resume right after its original".
5. The group has a consumer timestamp (committed at ``O`` or earlier, so it never points
   past what the group read) → the first target record at or after that timestamp →
   ``timestamp``, approximate (records with the same timestamp are read again:
   at-least-once rather than a skip); ``gap`` unknown (-1).
6. ``O`` is before every known run → the first run's start, ``before-first``,
   approximate; ``gap`` = offsets between ``O`` and the first run.
7. Otherwise nothing is known → ``none``: no destination offset.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final, Protocol

from crossfeed.core import gaps
from crossfeed.core.gaps import Gap
from crossfeed.core.offset_ranges import Translation, TranslationKind
from crossfeed.core.partitions import TopicPartition
from crossfeed.translation.scan import Kind, RangeScan

MAX_OFFSET: Final = 2**63 - 1
FRONTIER_SCAN_LIMIT: Final = 10_000
"""Records read between the frontier and ``O`` to tell holes from missing records."""
BACK_WINDOW: Final = 500
"""Offsets looked back from the end of the source for the last target copy (rule 4)."""


class Method(enum.StrEnum):
    """Which rule of the module docstring gave the destination offset."""

    OFFSET_SYNC = "offset-sync"
    FRONTIER = "frontier"
    HEADER = "header"
    TIMESTAMP = "timestamp"
    BEFORE_FIRST = "before-first"
    NONE = "none"
    SOURCE_DELETED = "source-deleted"


@dataclass(frozen=True, slots=True)
class ConsumerStamp:
    """A group's last commit as the consumer wrapper recorded it in __consumer_timestamps."""

    committed_offset: int
    timestamp_ms: int
    """Timestamp of the last record the group consumed (the one before the offset)."""
    committed_at_ms: int = 0


@dataclass(frozen=True, slots=True)
class LogStart:
    """What rule 0 needs to know of a source partition besides the offset syncs."""

    tp: TopicPartition
    offset: int
    """The partition's log start offset as last known (it only grows)."""
    next_copied: int | None = None
    """For an offset in a hole between runs: the source offset the next run starts at
    (``OffsetSyncIndex.next_copied``); None when not known."""
    policy: str = "continue"
    """The feed's ``gap.policy``: ``continue`` or ``stop``."""
    acknowledged: bool = False
    """The position's key (``gaps.key_of``) is in the feed's ``gap.acknowledged``."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """Where a group resumes on the destination partition."""

    target_offset: int | None
    method: Method
    exact: bool
    gap: int
    """Copyable source records the group consumed past what the target holds (0 when
    exact; an upper bound when counted in offsets; -1 when unknown)."""
    lost: Gap | None = None
    """Rule 0: the offsets from the group's position on that no longer exist at the
    source and were never copied (a gap of the group: its ``key`` acknowledges it)."""
    held: bool = False
    """Rule 0 under ``gap.policy=stop``, not acknowledged: the group partition is not
    moved (``target_offset`` is where it would go once acknowledged)."""


class Lookups(Protocol):
    """The I/O translation may need; None means "cannot tell now"."""

    def scan(self, start: int, end: int, limit: int) -> RangeScan | None:
        """Committed records of source offsets ``[start, end)``, at most ``limit``."""
        ...

    def by_timestamp(self, timestamp_ms: int) -> int | None:
        """First target offset whose record timestamp is >= ``timestamp_ms`` (the end
        offset if there is none)."""
        ...


def decide(
    offset: int,
    found: Translation | None,
    stamp: ConsumerStamp | None,
    lookups: Lookups,
    log_start: LogStart | None = None,
) -> Outcome:
    """Translate one committed offset by the rules of the module docstring.

    ``found`` is ``index.translate(offset)`` of the partition's OffsetSyncIndex (taken
    by the caller under the index's lock), None when there is no run; ``log_start``:
    what is known of the source partition's log start (None: nothing, rule 0 is skipped).
    """
    if offset < 0:
        raise ValueError(f"committed offset must be >= 0, got {offset}")
    lost = deleted(offset, found, log_start)
    if lost is not None:
        assert found is not None and log_start is not None
        held = log_start.policy == "stop" and not log_start.acknowledged
        consumed = found.gap if found.kind is TranslationKind.FRONTIER else 0
        return Outcome(
            found.target_offset, Method.SOURCE_DELETED, False, consumed, lost=lost, held=held
        )
    if found is not None and found.exact:
        return Outcome(found.target_offset, Method.OFFSET_SYNC, True, 0)
    if found is not None and found.kind is TranslationKind.FRONTIER:
        frontier = offset - found.gap
        between = lookups.scan(frontier, offset, FRONTIER_SCAN_LIMIT)
        if between is not None and between.complete and between.copyable == 0:
            return Outcome(found.target_offset, Method.OFFSET_SYNC, True, 0)
        gap = between.copyable_bound if between is not None else found.gap
        return Outcome(found.target_offset, Method.FRONTIER, False, gap)

    # No run covers the offset: it is before the first run, or there is no run at all.
    before_first = found is not None  # the only kind left
    first_run = offset + found.gap if found is not None else MAX_OFFSET
    ahead = lookups.scan(offset, first_run, 1)
    if ahead is not None:
        if before_first and ahead.empty:
            assert found is not None
            return Outcome(found.target_offset, Method.OFFSET_SYNC, True, 0)
        if ahead.first is not None and ahead.first.kind is Kind.TARGET_COPY:
            assert ahead.first.target_offset is not None
            return Outcome(ahead.first.target_offset, Method.HEADER, True, 0)
        if not before_first and ahead.empty and offset > 0:
            behind = lookups.scan(max(0, offset - BACK_WINDOW), offset, BACK_WINDOW)
            last = behind.last if behind is not None else None
            if last is not None and last.kind is Kind.TARGET_COPY:
                assert last.target_offset is not None
                return Outcome(last.target_offset + 1, Method.HEADER, True, 0)
    if stamp is not None and 0 <= stamp.committed_offset <= offset and stamp.timestamp_ms >= 0:
        by_time = lookups.by_timestamp(stamp.timestamp_ms)
        if by_time is not None:
            return Outcome(by_time, Method.TIMESTAMP, False, -1)
    if found is not None:
        return Outcome(found.target_offset, Method.BEFORE_FIRST, False, found.gap)
    return Outcome(None, Method.NONE, False, -1)


def deleted(offset: int, found: Translation | None, log_start: LogStart | None) -> Gap | None:
    """Rule 0: the offsets from ``offset`` on that the source deleted before they were
    copied, None when the target holds what a group at ``offset`` reads next."""
    if log_start is None or found is None or offset >= log_start.offset:
        return None
    kind = found.kind
    if kind is TranslationKind.COVERED:
        return None  # the record at the offset was copied: the target has it
    if kind is TranslationKind.AFTER_GAP:
        if log_start.next_copied is None:
            return None
        following: int | None = log_start.next_copied
    elif kind is TranslationKind.BEFORE_FIRST:
        following = offset + found.gap
    else:  # caught up with, or past, the copies: nothing was copied after the offset
        following = None
    if following is not None and following < log_start.offset:
        return None  # copies of records below the log start follow: a hole when copied
    return gaps.gap_at(log_start.tp, offset, log_start.offset)
