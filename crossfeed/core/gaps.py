"""Gaps: source records deleted before a puller copied them, and what to do about them.

A task needs a source partition from its next offset on. When the source no longer holds
that offset — retention ran while the pullers were down, ``DeleteRecords``, a compacted
topic whose log start moved — the records from there up to the partition's log start
offset will never reach the target. That is never passed over in silence: the puller
reports the gap (log, status, metric, a dead letter) and then does what the feed's
``gap.policy`` says (``continue`` from the log start, or ``stop`` the partition until an
operator acknowledges the gap with ``crossfeed changefeed ack-gap``).

Invariants:

A. ``classify`` sorts every position against the partition's ``[log_start, log_end]``:
   below it is a gap (``Gap`` with ``first == position`` and ``end == log_start``, so
   ``count >= 1``); inside it nothing is lost (the read is retried there); above it the
   source lost records it had already served (never copied again, never skipped).
B. A gap's ``key`` (``topic/partition@first``) does not depend on the log start, which
   moves on while the gap waits: an acknowledgment given for the key a report printed
   still matches after more records were deleted.
C. ``acknowledge`` is idempotent and keeps every earlier key; ``acknowledged`` reads
   back exactly the keys given.
D. ``carried(tp, carry(g))`` gives back the gaps ``g`` of ``tp`` (sorted, each once): the
   text a task's marks carry, so a gap stays reported across restarts until acknowledged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from crossfeed.core.partitions import TopicPartition

POLICIES = ("continue", "stop")


class Position(enum.Enum):
    GAP = "gap"  # below the log start: records lost
    READABLE = "readable"  # within the log: read there again
    BEYOND_END = "beyond-end"  # past the log end: the source lost records it had served


@dataclass(frozen=True, order=True)
class Gap:
    """Offsets ``first`` up to ``end`` (excluded) of ``tp`` are gone at the source."""

    tp: TopicPartition
    first: int
    end: int  # the log start offset when the gap was seen

    def __post_init__(self) -> None:
        if not 0 <= self.first < self.end:
            raise ValueError(f"a gap needs 0 <= first < end, got {self.first}..{self.end}")

    @property
    def count(self) -> int:
        """Offsets lost: at most that many records (transaction markers take offsets too)."""
        return self.end - self.first

    @property
    def last(self) -> int:
        return self.end - 1

    @property
    def key(self) -> str:
        return key_of(self.tp, self.first)

    def describe(self, feed: str, policy: str, *, acknowledged: bool = False) -> str:
        """The one line a log, the status and the alert's runbook show."""
        lost = (
            f"{self.tp}: offsets {self.first}-{self.last} ({self.count} records) were deleted "
            f"at the source before they were copied"
        )
        if acknowledged or policy == "continue":
            then = f"copying went on from offset {self.end}"
            if acknowledged:
                return f"{lost}; {then} (acknowledged)"
            return (
                f"{lost}; {then} (gap.policy=continue); acknowledge with "
                f"'crossfeed changefeed ack-gap {feed} {self.key}'"
            )
        return (
            f"{lost}; the partition waits (gap.policy=stop) until acknowledged: "
            f"'crossfeed changefeed ack-gap {feed} {self.key}'"
        )


def key_of(tp: TopicPartition, first: int) -> str:
    """``topic/partition@first``: the key ``crossfeed changefeed ack-gap`` takes (B); a
    consumer group's position in deleted records has one too (translation/rules.py)."""
    return f"{tp}@{first}"


def classify(position: int, log_start: int, log_end: int) -> Position:
    """Where ``position`` (the next offset a task needs) stands in the partition (A)."""
    if log_start < 0 or log_end < log_start:
        raise ValueError(f"not a partition's log: start {log_start}, end {log_end}")
    if position < log_start:
        return Position.GAP
    if position <= log_end:
        return Position.READABLE
    return Position.BEYOND_END


def gap_at(tp: TopicPartition, position: int, log_start: int) -> Gap:
    """The gap of a position below the log start (A)."""
    return Gap(tp, max(position, 0), log_start)


def carry(found: list[Gap]) -> str:
    """The gaps of one partition as its marks carry them: ``first-end,...`` (D)."""
    return ",".join(f"{g.first}-{g.end}" for g in sorted(set(found)))


def carried(tp: TopicPartition, text: str) -> list[Gap]:
    """The gaps of ``tp`` a mark carried (D); ValueError for text :func:`carry` never
    writes."""
    out = []
    for part in text.split(","):
        first, sep, end = part.strip().partition("-")
        if not sep or not first.isdigit() or not end.isdigit():
            raise ValueError(f"expected <first>-<end>[,...] in a mark's gaps, got {text!r}")
        out.append(Gap(tp, int(first), int(end)))
    return sorted(set(out))


def acknowledged(text: str | None) -> frozenset[str]:
    """The gap keys of a feed's ``gap.acknowledged`` option (comma-separated)."""
    return frozenset(k.strip() for k in (text or "").split(",") if k.strip())


def acknowledge(text: str | None, keys: list[str]) -> str:
    """``gap.acknowledged`` with ``keys`` added (C); ValueError for a key that is not
    ``topic/partition@offset``."""
    for key in keys:
        parse_key(key)
    known = acknowledged(text)
    merged = [*sorted(known), *sorted(set(keys) - known)]
    return ",".join(merged)


def parse_key(key: str) -> tuple[TopicPartition, int]:
    """``topic/partition@offset`` -> (the partition, the gap's first offset)."""
    where, sep, offset = key.strip().rpartition("@")
    if not sep or not offset.isascii() or not offset.isdigit():
        raise ValueError(
            f"expected <topic>/<partition>@<offset> (as the report prints), got {key!r}"
        )
    return TopicPartition.parse(where), int(offset)
