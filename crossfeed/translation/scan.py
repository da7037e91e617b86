"""What a range of source offsets holds, as far as offset translation cares.

Offset syncs only describe records the sink wrote. Between and after the runs, the
source holds offsets of three kinds, and translation must tell them apart:

* nothing at all — compacted away, aborted transactions, transaction markers (a
  read_committed reader never sees them): skipping them skips nothing;
* records the feed copies (**copyable**): if the target lacks them, they are a gap;
* records the feed never copies because they came *from* the target (loop prevention,
  docs/design.md, guarantee 4) — after a failback, the old standby holds copies of the old
  primary's records. Such a **target copy** names its original in its provenance
  (``crossfeed-prov``, or a legacy ``crossfeed-src``), so the original's offset on the
  target is known exactly.

A :class:`RangeScan` summarises one read of ``[start, end)``; reads are bounded, so it
may cover only ``[start, scanned_to)``, and everything derived from it says so.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from crossfeed.core.provenance import should_copy, src_of

Header = tuple[str, bytes | None]


class Kind(enum.Enum):
    """What one committed source record is to a feed copying into a target cluster."""

    COPYABLE = "copyable"
    """The feed copies it: the target has (or should have) a copy."""
    TARGET_COPY = "target-copy"
    """A copy of a record of the target cluster: the original is on the target."""
    OTHER = "other"
    """Never copied for another reason (it passed the target on a longer path)."""


@dataclass(frozen=True, slots=True)
class Seen:
    """One committed record met by a scan."""

    offset: int
    kind: Kind
    target_offset: int | None = None
    """For a target copy: the offset of its original in the target partition."""
    timestamp_ms: int = -1


def classify(
    offset: int,
    headers: Sequence[Header] | None,
    *,
    target_cluster_id: str,
    target_topic: str,
    target_partition: int,
    timestamp_ms: int = -1,
) -> Seen:
    """Classify one source record (see :class:`Kind`).

    A record whose provenance cannot be read is copyable: that is what the puller does
    with it, so the target has (or should have) it.
    """
    if not headers:
        return Seen(offset, Kind.COPYABLE, timestamp_ms=timestamp_ms)
    try:
        if should_copy(headers, target_cluster_id):
            return Seen(offset, Kind.COPYABLE, timestamp_ms=timestamp_ms)
    except ValueError:
        return Seen(offset, Kind.COPYABLE, timestamp_ms=timestamp_ms)
    src = src_of(headers)
    if src is not None and (src.cluster_id, src.topic, src.partition) == (
        target_cluster_id,
        target_topic,
        target_partition,
    ):
        return Seen(offset, Kind.TARGET_COPY, src.offset, timestamp_ms)
    return Seen(offset, Kind.OTHER, timestamp_ms=timestamp_ms)


@dataclass(frozen=True, slots=True)
class RangeScan:
    """The committed records of source offsets ``[start, scanned_to)``, summarised.

    Invariant: ``start <= scanned_to``; ``first``/``last`` are None iff no record was seen.
    """

    start: int
    end: int
    """Exclusive end that was asked for."""
    scanned_to: int
    """Everything in ``[start, scanned_to)`` was read (``>= end`` when complete)."""
    copyable: int = 0
    """Copyable records seen."""
    first: Seen | None = None
    last: Seen | None = None
    newest_copyable_ts_ms: int = -1
    """Timestamp of the newest copyable record seen (-1: none or unknown)."""

    @property
    def complete(self) -> bool:
        """True when the whole asked range was read."""
        return self.scanned_to >= self.end

    @property
    def copyable_bound(self) -> int:
        """Copyable records in ``[start, end)``: exact when complete, else an upper bound
        (every unread offset counted as one record)."""
        return self.copyable + max(0, self.end - self.scanned_to)

    @property
    def empty(self) -> bool:
        """True when the whole range holds no record at all (holes only)."""
        return self.complete and self.first is None


def summarize(start: int, end: int, scanned_to: int, seen: Iterable[Seen]) -> RangeScan:
    """Fold records (in offset order, all within ``[start, scanned_to)``) into a scan."""
    if scanned_to < start:
        raise ValueError(f"scanned_to {scanned_to} is before start {start}")
    first: Seen | None = None
    last: Seen | None = None
    copyable = 0
    newest = -1
    for record in seen:
        if not start <= record.offset < scanned_to:
            raise ValueError(f"record at {record.offset} is outside [{start}, {scanned_to})")
        if last is not None and record.offset <= last.offset:
            raise ValueError(f"records out of order: {record.offset} after {last.offset}")
        if first is None:
            first = record
        last = record
        if record.kind is Kind.COPYABLE:
            copyable += 1
            newest = max(newest, record.timestamp_ms)
    return RangeScan(start, end, scanned_to, copyable, first, last, newest)
