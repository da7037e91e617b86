"""The timestamp vocabulary (docs/design.md, Vocabulary): commit_ts, resolved_ts, consistency_ts.

Units: ``*_us`` are microseconds, ``*_ms`` milliseconds; a bare ``ts`` is a commit_ts in
microseconds. Every watermark here means "≤ ts is complete":

* resolved_ts of a source partition: no record of it with commit_ts ≤ resolved_ts will
  arrive later;
* global resolved_ts: min over all source partitions of the feed;
* checkpoint_ts of a task: everything with commit_ts ≤ it is durably in the target;
* consistency_ts: min over the tasks' checkpoint_ts, and it never goes backwards.

Invariants:

A. ``commit_ts_us`` is the ``crossfeed-commit-ts`` header when present, else the record
   timestamp × 1000; a malformed header is an error (ValueError), never silently replaced.
B. ``consistency_ts`` and each partition's resolved_ts in :class:`ResolvedTracker` are
   monotonic: a lower value never lowers them.
C. ``ResolvedTracker.global_resolved`` is None while any tracked partition has no
   resolved_ts yet (or nothing is tracked): a partition never heard from may still deliver
   anything.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Final, Generic, TypeVar

from crossfeed.wire import grammar
from crossfeed.wire.headers import COMMIT_TS

MAX_TS: Final = grammar.MAX_LONG
"""Largest commit_ts (a signed 64-bit integer, like Kafka's timestamps)."""

_DECIMAL = re.compile(grammar.COMMIT_TS.python())

K = TypeVar("K", bound=Hashable)


def parse_commit_ts(value: bytes | None) -> int:
    """Parse a ``crossfeed-commit-ts`` value (decimal microseconds); ValueError if bad."""
    # The usual value first, without the regex (read for every marker a sink applies):
    # bytes.isdigit() is ASCII digits only, as the pattern is.
    if type(value) is bytes and 0 < len(value) <= grammar.LONG_DIGITS and value.isdigit():
        ts = int(value)
        if ts <= MAX_TS:
            return ts
    if value is None:
        raise ValueError(f"{COMMIT_TS} header has no value; expected decimal microseconds")
    text = value.decode("ascii", errors="replace")
    if not _DECIMAL.fullmatch(text) or int(text) > MAX_TS:
        raise ValueError(
            f"{COMMIT_TS} header {value!r} is not a commit timestamp: expected decimal "
            f"microseconds between 0 and {MAX_TS}"
        )
    return int(text)


def commit_ts_us(headers: Sequence[tuple[str, bytes | None]], record_timestamp_ms: int) -> int:
    """The commit_ts of a record (invariant A).

    Several ``crossfeed-commit-ts`` headers must agree. Without the header, a record
    without a timestamp (Kafka's -1) is an error: it has no place in commit order.
    """
    found = [parse_commit_ts(value) for name, value in headers if name == COMMIT_TS]
    if found:
        if any(ts != found[0] for ts in found):
            raise ValueError(f"conflicting {COMMIT_TS} headers: {found}")
        return found[0]
    if record_timestamp_ms < 0:
        raise ValueError(
            f"record has no timestamp ({record_timestamp_ms}) and no {COMMIT_TS} header"
        )
    return record_timestamp_ms * 1000


BACKLOG_SHARE = 4
"""A reader catching up lets its transaction grow to 1/BACKLOG_SHARE of how far behind it
is: fewer, larger commits while it matters little, short ones again as it catches up."""


def commit_interval_ms(
    batch_full: bool, newest_ts_ms: int, now_ms: float, keep_up_ms: float, backlog_ms: float
) -> float:
    """How long a reader's open transaction may stay open, after its last read.

    Keeping up: ``keep_up_ms``, for low lag. Catching up a backlog — its last read filled
    the batch (more is waiting) — a quarter of the age of the newest record read, between
    ``keep_up_ms`` and ``backlog_ms``: a reader hours behind commits every ``backlog_ms``
    (throughput), one a second behind every 250 ms, so a short stall does not leave it at
    the longest interval for as long as it takes to catch up (a switch to ``backlog_ms``
    at one second behind held the lag of a half-loaded pipeline at ~2 s).

    A full batch of fresh records is no backlog (big fetches fill batches when a reader is
    only a moment behind), and old records in a partial batch are none either: longer
    transactions upstream make every record old, and the reader must still come back to
    ``keep_up_ms``. A record without a timestamp (< 0) says nothing; a timestamp ahead of
    the clock (producer skew) is fresh.
    """
    if not batch_full or newest_ts_ms < 0:
        return keep_up_ms
    return min(backlog_ms, max(keep_up_ms, (now_ms - newest_ts_ms) / BACKLOG_SHARE))


def consistency_ts(task_checkpoints: Mapping[str, int], previous: int) -> int:
    """The feed's new consistency_ts: min over the tasks' checkpoint_ts, never below
    ``previous``; with no tasks, ``previous``."""
    if not task_checkpoints:
        return previous
    return max(previous, min(task_checkpoints.values()))


class ResolvedTracker(Generic[K]):
    """resolved_ts per source partition and the global resolved_ts (min over them).

    Partitions are keys of any hashable type (e.g. ``TopicPartition``). A partition is
    tracked once registered or advanced; register every partition of the feed up front
    so that a silent one holds the global resolved_ts back (invariant C).
    """

    __slots__ = ("_resolved",)

    def __init__(self, partitions: Iterable[K] = ()) -> None:
        self._resolved: dict[K, int | None] = dict.fromkeys(partitions)

    def register(self, partition: K) -> None:
        """Track ``partition`` (no resolved_ts yet unless it already has one)."""
        self._resolved.setdefault(partition, None)

    def remove(self, partition: K) -> None:
        """Stop tracking ``partition`` (e.g. its topic left the feed)."""
        self._resolved.pop(partition, None)

    def advance(self, partition: K, resolved_ts: int) -> int:
        """Record a resolved mark; returns the partition's resolved_ts (monotonic, B)."""
        current = self._resolved.get(partition)
        value = resolved_ts if current is None else max(current, resolved_ts)
        self._resolved[partition] = value
        return value

    def resolved(self, partition: K) -> int | None:
        """The partition's resolved_ts, None if it has none yet (or is not tracked)."""
        return self._resolved.get(partition)

    def pending(self) -> list[K]:
        """Tracked partitions without a resolved_ts: what holds the global one back."""
        return [p for p, ts in self._resolved.items() if ts is None]

    def global_resolved(self) -> int | None:
        """Min resolved_ts over tracked partitions; None if any has none or none tracked."""
        values = list(self._resolved.values())
        if not values:
            return None
        known = [v for v in values if v is not None]
        if len(known) < len(values):
            return None
        return min(known)
