"""Exact offset-sync arithmetic (docs/design.md: guarantee 5, Sink and Coordinator).

An *offset sync* maps a run of source offsets of one source partition onto a run of
target offsets of one target partition. Vocabulary:

* a **run** (:class:`OffsetRun`) is contiguous on both sides: source offsets
  ``source_start..source_end`` (inclusive) were copied, in order, to target offsets
  ``target_start..target_end`` with ``target_end - target_start == source_end - source_start``;
* a **gap** is a break in either side: source offsets that have no copy (compacted away,
  aborted source transactions under read_committed, records filtered or dropped by loop
  prevention) or a jump of the target offsets (see transactions below, or other producers
  writing to the same target partition, as in active-active).

Kafka transactions and runs — what the sink authors must know:
    The sink writes with Kafka transactions. Each commit (and each abort) appends a control
    marker to every target partition the transaction wrote to, and a marker occupies an
    offset. So *within* one transaction the target offsets of one partition are contiguous
    (when the sink is the only writer), but the first record of the next transaction lands
    at least two offsets after the last record of the previous one. A run can therefore
    never continue across a commit: expect at least one run per target partition per
    transaction. :meth:`OffsetSyncWriter.flush` is called at each commit; a piece it emits
    is a complete run or, when a later piece happens to be contiguous on both sides
    (non-transactional producer), one that the reader merges (:func:`merge_runs`,
    :meth:`OffsetSyncIndex.add`). Runs are never merged across a target jump: that would
    translate offsets in the later run to records before them (re-reads).

    Write the ``OffsetSync`` records of a transaction *inside* that transaction (produce,
    flush to get the delivery reports, feed the writer, ``flush()``, produce the syncs,
    ``send_offsets_to_transaction``, commit). Then an aborted transaction takes its syncs
    with it, and :meth:`OffsetSyncWriter.abort` resets the writer.

Invariants of :class:`OffsetSyncIndex` (checked by :meth:`OffsetSyncIndex.check`):

A. Runs are sorted by source offset and do not overlap on the source side.
B. Target offsets increase with source offsets: ``runs[i].target_end < runs[i+1].target_start``.
C. No two neighbouring runs are contiguous on both sides (they are merged into one).
D. The newest information wins: :meth:`OffsetSyncIndex.add` drops every older run that
   contradicts the new one (overlapping it with a different mapping, or breaking B), and
   merges every run that agrees with it.

Translation rules (a committed offset ``O`` means "the next record to read is O"),
:meth:`OffsetSyncIndex.translate`:

1. No run at all → ``None``; the caller falls back to timestamps, flagged approximate.
2. ``O`` inside a run → that run's copy of ``O``. Exact.
3. ``O`` in a gap between two runs (source offsets ``O..`` were not copied) → the target
   offset of the next replicated record, the next run's ``target_start``. Exact: nothing
   that exists in the target is skipped or re-read.
4. ``O == last.source_end + 1`` (caught up with everything replicated) →
   ``last.target_end + 1``. Exact.
5. ``O > last.source_end + 1`` (replication lag) → the replicated frontier
   ``last.target_end + 1``, ``frontier``, not exact; ``gap = O - (last.source_end + 1)``
   source offsets the group consumed on the source that the target does not (yet) have.
6. ``O < first.source_start`` → ``first.target_start``, not exact;
   ``gap = first.source_start - O`` source offsets before the first known run: they were
   never synced, or their syncs are gone (the offset-syncs topic is compacted, so keep the
   index in memory as the topic is read).
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class OffsetRun:
    """Source offsets ``source_start..source_end`` (inclusive) copied to ``target_start..``.

    Invariant: ``0 <= source_start <= source_end`` and ``target_start >= 0``; the run is
    contiguous on both sides, so it has ``length`` records on each.
    """

    source_start: int
    source_end: int
    target_start: int

    def __post_init__(self) -> None:
        if self.source_start < 0 or self.target_start < 0:
            raise ValueError(f"offsets must be >= 0: {self!r}")
        if self.source_end < self.source_start:
            raise ValueError(f"source_end < source_start: {self!r}")

    @property
    def length(self) -> int:
        """Number of records in the run."""
        return self.source_end - self.source_start + 1

    @property
    def target_end(self) -> int:
        """Last target offset of the run (inclusive)."""
        return self.target_start + self.source_end - self.source_start

    @property
    def delta(self) -> int:
        """``target - source`` for every record of the run."""
        return self.target_start - self.source_start

    def translate(self, source_offset: int) -> int | None:
        """Target offset of ``source_offset``'s copy, or None outside the run."""
        if self.source_start <= source_offset <= self.source_end:
            return source_offset + self.delta
        return None

    def continued_by(self, other: OffsetRun) -> bool:
        """True when ``other`` starts right after this run on both sides."""
        return (
            other.source_start == self.source_end + 1 and other.target_start == self.target_end + 1
        )


def _agrees(a: OffsetRun, b: OffsetRun) -> bool:
    """True when a and b overlap or touch and map source offsets identically (one line)."""
    return (
        a.delta == b.delta
        and a.source_start <= b.source_end + 1
        and b.source_start <= a.source_end + 1
    )


def _union(a: OffsetRun, b: OffsetRun) -> OffsetRun:
    start = min(a.source_start, b.source_start)
    return OffsetRun(start, max(a.source_end, b.source_end), start + a.delta)


def merge_runs(runs: Iterable[OffsetRun]) -> list[OffsetRun]:
    """Sort runs, merge duplicates, overlaps and contiguous pieces that agree.

    Returns runs satisfying invariants A–C. Raises ValueError if two runs contradict each
    other (the same source offset mapped to two target offsets, or target offsets going
    backwards); use :class:`OffsetSyncIndex` when newer runs should win instead.
    """
    merged: list[OffsetRun] = []
    for run in sorted(runs):
        if merged and _agrees(merged[-1], run):
            merged[-1] = _union(merged[-1], run)
            continue
        if merged and (
            run.source_start <= merged[-1].source_end or run.target_start <= merged[-1].target_end
        ):
            raise ValueError(f"contradicting offset runs: {merged[-1]!r} and {run!r}")
        merged.append(run)
    return merged


class OffsetSyncWriter:
    """Turns delivery reports of one source partition → one target partition into runs.

    Feed ``add(source_offset, target_offset)`` in increasing source order (the order in
    which a partition's records are produced and acknowledged). The open run is extended
    while both offsets advance by exactly one; any other step closes it and opens a new
    one. ``flush()`` at each transaction commit closes the open run; ``abort()`` after an
    aborted transaction forgets everything not yet taken. Pure state: no I/O.
    """

    __slots__ = ("_closed", "_last", "_open")

    def __init__(self) -> None:
        self._closed: list[OffsetRun] = []
        self._open: OffsetRun | None = None
        self._last: tuple[int, int] | None = None

    @property
    def open_run(self) -> OffsetRun | None:
        """The run being extended, if any."""
        return self._open

    def add(self, source_offset: int, target_offset: int) -> None:
        """Record that ``source_offset`` was written at ``target_offset``.

        Raises ValueError if either offset does not increase (reports out of order).
        """
        if source_offset < 0 or target_offset < 0:
            raise ValueError(f"offsets must be >= 0: ({source_offset}, {target_offset})")
        if self._last is not None and (
            source_offset <= self._last[0] or target_offset <= self._last[1]
        ):
            raise ValueError(
                f"delivery report ({source_offset}, {target_offset}) does not follow "
                f"{self._last}: source and target offsets must both increase"
            )
        self._last = (source_offset, target_offset)
        run = self._open
        if run is not None and source_offset == run.source_end + 1 == target_offset - run.delta:
            self._open = OffsetRun(run.source_start, source_offset, run.target_start)
            return
        if run is not None:
            self._closed.append(run)
        self._open = OffsetRun(source_offset, source_offset, target_offset)

    def add_block(self, source_offsets: Sequence[int], target_start: int) -> None:
        """Record that ``source_offsets`` (increasing) were written at the contiguous
        target offsets ``target_start, target_start + 1, …`` — the same as ``add`` for
        each pair, but a block without source gaps costs one step, not one per record
        (the sink knows a block's target offsets are contiguous from its first and last
        delivery reports)."""
        count = len(source_offsets)
        if not count:
            return
        first = source_offsets[0]
        if source_offsets[-1] - first == count - 1:  # no source gap: one piece
            self.add(first, target_start)
            self._extend(source_offsets[-1], target_start + count - 1)
            return
        for i, source_offset in enumerate(source_offsets):
            self.add(source_offset, target_start + i)

    def _extend(self, source_end: int, target_end: int) -> None:
        """Grow the open run (which ends where the block began) to the block's end."""
        run = self._open
        assert run is not None and target_end - source_end == run.delta
        if source_end > run.source_end:
            self._open = OffsetRun(run.source_start, source_end, run.target_start)
            self._last = (source_end, target_end)

    def take_closed_runs(self) -> list[OffsetRun]:
        """Runs that can no longer grow, oldest first; they are handed over only once."""
        closed, self._closed = self._closed, []
        return closed

    def flush(self) -> list[OffsetRun]:
        """Close the open run and return every run not yet taken (call at each commit).

        A later ``add`` contiguous on both sides starts a piece the reader merges back.
        """
        if self._open is not None:
            self._closed.append(self._open)
            self._open = None
        return self.take_closed_runs()

    def abort(self) -> None:
        """Forget the open run and untaken runs (the transaction holding them aborted).

        The ordering check restarts: the next transaction re-reads lower source offsets.
        """
        self._closed = []
        self._open = None
        self._last = None


class TranslationKind(enum.Enum):
    """Which translation rule of the module docstring applied."""

    COVERED = "covered"
    """Rule 2: the committed offset's record was replicated."""
    AFTER_GAP = "after-gap"
    """Rule 3: resume at the next replicated record after unreplicated offsets."""
    CAUGHT_UP = "caught-up"
    """Rule 4: resume right after the last replicated record."""
    FRONTIER = "frontier"
    """Rule 5: the source is ahead of what was replicated; resume at the frontier."""
    BEFORE_FIRST = "before-first"
    """Rule 6: the offset is older than every known run."""


@dataclass(frozen=True, slots=True)
class Translation:
    """Where a group that committed a source offset resumes on the target."""

    target_offset: int
    kind: TranslationKind
    gap: int = 0
    """Source offsets unaccounted for: past the frontier (rule 5) or before the first run
    (rule 6); 0 otherwise. Offsets, not records: compaction may have removed some."""

    @property
    def exact(self) -> bool:
        """True for zero re-reads and zero skips of records that exist in the target."""
        return self.kind in (
            TranslationKind.COVERED,
            TranslationKind.AFTER_GAP,
            TranslationKind.CAUGHT_UP,
        )

    @property
    def frontier(self) -> bool:
        """True when the group is ahead of what has been replicated (rule 5)."""
        return self.kind is TranslationKind.FRONTIER


class OffsetSyncIndex:
    """In-memory runs of one source partition → one target partition; see module rules.

    Feed it every ``OffsetSync`` read from the offset-syncs topic, in topic order.
    """

    __slots__ = ("_runs", "_starts")

    def __init__(self, runs: Iterable[OffsetRun] = ()) -> None:
        self._runs: list[OffsetRun] = []
        self._starts: list[int] = []
        for run in runs:
            self.add(run)

    def __len__(self) -> int:
        return len(self._runs)

    def runs(self) -> list[OffsetRun]:
        """The runs, sorted (a copy)."""
        return list(self._runs)

    def add(self, run: OffsetRun) -> None:
        """Insert ``run``; it wins over older runs that contradict it (invariant D)."""
        runs = self._runs
        # Runs before lo end (on both sides) before the new run starts, with room for a
        # gap; runs from hi on start after it ends. Everything in between touches it.
        lo = bisect.bisect_left(self._starts, run.source_start)
        while lo > 0 and (
            runs[lo - 1].source_end + 1 >= run.source_start
            or runs[lo - 1].target_end + 1 >= run.target_start
        ):
            lo -= 1
        hi = lo
        while hi < len(runs) and (
            runs[hi].source_start <= run.source_end + 1
            or runs[hi].target_start <= run.target_end + 1
        ):
            hi += 1
        merged = run
        for old in runs[lo:hi]:
            if _agrees(old, merged):
                merged = _union(old, merged)
        # Runs that agree were merged; of the others, those strictly before or after the
        # merged run on both sides stay, the rest contradict it and are dropped.
        survivors_before = [
            old
            for old in runs[lo:hi]
            if old.source_end < merged.source_start and old.target_end < merged.target_start
        ]
        survivors_after = [
            old
            for old in runs[lo:hi]
            if old.source_start > merged.source_end and old.target_start > merged.target_end
        ]
        replacement = [*survivors_before, merged, *survivors_after]
        runs[lo:hi] = replacement
        self._starts[lo:hi] = [r.source_start for r in replacement]

    def truncate_before(self, source_offset: int) -> int:
        """Drop runs that end before ``source_offset`` (e.g. the source log start offset,
        or the lowest committed offset any group can still need); returns how many.

        With a transactional sink there is at least one run per commit, so a long-lived
        index grows with the commit rate; this bounds it. Translations of offsets below
        ``source_offset`` then follow rule 6.
        """
        cut = 0
        while cut < len(self._runs) and self._runs[cut].source_end < source_offset:
            cut += 1
        del self._runs[:cut]
        del self._starts[:cut]
        return cut

    def translate(self, source_offset: int) -> Translation | None:
        """Translate a committed source offset by rules 1–6 of the module docstring."""
        if source_offset < 0:
            raise ValueError(f"source offset must be >= 0, got {source_offset}")
        runs = self._runs
        if not runs:
            return None
        i = bisect.bisect_right(self._starts, source_offset) - 1
        if i < 0:
            first = runs[0]
            return Translation(
                first.target_start, TranslationKind.BEFORE_FIRST, first.source_start - source_offset
            )
        run = runs[i]
        target = run.translate(source_offset)
        if target is not None:
            return Translation(target, TranslationKind.COVERED)
        if i + 1 < len(runs):
            return Translation(runs[i + 1].target_start, TranslationKind.AFTER_GAP)
        if source_offset == run.source_end + 1:
            return Translation(run.target_end + 1, TranslationKind.CAUGHT_UP)
        return Translation(
            run.target_end + 1, TranslationKind.FRONTIER, source_offset - run.source_end - 1
        )

    def next_copied(self, source_offset: int) -> int | None:
        """The first source offset after ``source_offset`` that a run covers (the start of
        the next run), None when no run starts after it."""
        i = bisect.bisect_right(self._starts, source_offset)
        return self._starts[i] if i < len(self._starts) else None

    def check(self) -> None:
        """Assert invariants A–C (raises AssertionError); for tests and debugging."""
        assert self._starts == [r.source_start for r in self._runs]
        for a, b in itertools.pairwise(self._runs):
            assert a.source_end < b.source_start, (a, b)
            assert a.target_end < b.target_start, (a, b)
            assert not a.continued_by(b), (a, b)
