"""In-memory tables folded from two compacted topics: offset syncs and consumer timestamps.

``_crossfeed.offset-syncs`` (on a feed's target) is compacted by source partition, so
only the newest run of each partition survives compaction: the runs a translator needs
are the ones it read as they were written. A :class:`SyncBook` therefore keeps every run
in memory from the start of the topic, and is bounded by the translator, which
truncates each partition below the lowest offset any group still needs
(:meth:`SyncBook.truncate`), plus a hard cap of ``max_runs`` per partition.

The target may hold copies from several feeds (and both directions of active-active):
runs are kept per feed, by the ``feed`` field of each OffsetSync.

Not thread-safe: the owner serialises access (see ``follow.py``).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from crossfeed.core.offset_ranges import OffsetRun, OffsetSyncIndex, TranslationKind
from crossfeed.translation.latest import ON_DESTINATION, Known
from crossfeed.translation.rules import ConsumerStamp
from crossfeed.wire import codec, topics

MAX_RUNS: Final = 20_000
"""Runs kept per source partition at most (a transactional sink makes one per commit)."""
_BEYOND: Final = 2**62


@dataclass(frozen=True, slots=True)
class Frontier:
    """The replicated frontier of one source partition: the next source offset after the
    last copied run, and the target offset right after that run's last copy."""

    source_next: int
    target_next: int


@dataclass
class SyncEntry:
    """The runs of one feed for one source partition, and where its copies go."""

    feed: str
    source_cluster: str
    topic: str
    partition: int
    target_topic: str
    target_partition: int
    index: OffsetSyncIndex = field(default_factory=OffsetSyncIndex)

    def frontier(self) -> Frontier | None:
        return frontier_of(self.index)


def frontier_of(index: OffsetSyncIndex) -> Frontier | None:
    """The frontier of an index (None without runs).

    Translating an offset past every run is rule 5 of offset_ranges: its target offset is
    the last run's ``target_end + 1`` and its gap is measured from ``source_end + 1``;
    this reads both in O(log n) without copying the runs.
    """
    if not len(index):
        return None
    found = index.translate(_BEYOND)
    assert found is not None and found.kind is TranslationKind.FRONTIER
    return Frontier(_BEYOND - found.gap, found.target_offset)


class SyncBook:
    """OffsetSync runs by (feed, source topic, source partition)."""

    def __init__(self, max_runs: int = MAX_RUNS) -> None:
        if max_runs < 2:
            raise ValueError(f"max_runs must be >= 2, got {max_runs}")
        self.max_runs = max_runs
        self._entries: dict[tuple[str, str, int], SyncEntry] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def apply(self, key: str, value: bytes | None) -> None:
        """Fold one record of the offset-syncs topic (tombstones are ignored: the sink
        never writes them, and forgetting runs would only lose exactness)."""
        if not value:
            return
        self.add(codec.decode("OffsetSync", value))

    def add(self, sync: Mapping[str, Any]) -> None:
        """Fold one decoded OffsetSync."""
        key = (str(sync["feed"]), str(sync["topic"]), int(sync["partition"]))
        entry = self._entries.get(key)
        where = (sync["source_cluster"], sync["target_topic"], sync["target_partition"])
        if entry is None or (entry.source_cluster, entry.target_topic, entry.target_partition) != (
            where
        ):
            # A new partition, or the feed now copies from another cluster or into another
            # topic: runs of the old mapping say nothing about the new one.
            entry = SyncEntry(key[0], where[0], key[1], key[2], where[1], int(where[2]))
            self._entries[key] = entry
        run = OffsetRun(
            int(sync["source_start"]), int(sync["source_end"]), int(sync["target_start"])
        )
        entry.index.add(run)
        if len(entry.index) > self.max_runs:
            runs = entry.index.runs()
            entry.index.truncate_before(runs[len(runs) - self.max_runs * 3 // 4].source_start)

    def get(self, feed: str, topic: str, partition: int) -> SyncEntry | None:
        return self._entries.get((feed, topic, partition))

    def of_feed(self, feed: str) -> list[SyncEntry]:
        """Every source partition the feed has runs for, sorted."""
        return [e for k, e in sorted(self._entries.items()) if k[0] == feed]

    def truncate(self, feed: str, topic: str, partition: int, before: int) -> int:
        """Drop the runs of one partition that no offset >= ``before`` needs; returns how
        many were dropped.

        The run starting at or before ``before`` stays even when it ends before it: an
        offset in the gap after it then still translates by rule 3 (the next run's start,
        exact) rather than rule 6.
        """
        entry = self._entries.get((feed, topic, partition))
        if entry is None or not len(entry.index):
            return 0
        runs = entry.index.runs()
        starts = [run.source_start for run in runs]
        keep = bisect.bisect_right(starts, before) - 1
        if keep <= 0:
            return 0
        return entry.index.truncate_before(runs[keep].source_start)


class StampBook:
    """The newest ConsumerTimestamp per (group, topic, partition)."""

    def __init__(self) -> None:
        self._stamps: dict[tuple[str, str, int], ConsumerStamp] = {}

    def __len__(self) -> int:
        return len(self._stamps)

    def apply(self, key: str, value: bytes | None) -> None:
        """Fold one record of ``__consumer_timestamps`` (key ``<group>/<topic>/<partition>``;
        a tombstone forgets the entry)."""
        if not value:
            parsed = parse_stamp_key(key)
            if parsed is not None:
                self._stamps.pop(parsed, None)
            return
        record = codec.decode("ConsumerTimestamp", value)
        self._stamps[(record["group"], record["topic"], int(record["partition"]))] = ConsumerStamp(
            int(record["committed_offset"]),
            int(record["timestamp_ms"]),
            int(record["committed_at_ms"]),
        )

    def get(self, group: str, topic: str, partition: int) -> ConsumerStamp | None:
        return self._stamps.get((group, topic, partition))

    def items(self) -> list[tuple[tuple[str, str, int], ConsumerStamp]]:
        """Every (group, topic, partition) and its stamp."""
        return list(self._stamps.items())

    def of_group(self, group: str) -> dict[tuple[str, int], ConsumerStamp]:
        return {(t, p): s for (g, t, p), s in self._stamps.items() if g == group}

    def groups(self) -> set[str]:
        return {g for g, _, _ in self._stamps}


class RecordedBook:
    """The newest commit per (source cluster, group, topic, partition) that the client
    library's opt-in recorded on the destination (``_crossfeed.consumer-timestamps``)."""

    def __init__(self) -> None:
        self._stamps: dict[tuple[str, str, str, int], ConsumerStamp] = {}

    def __len__(self) -> int:
        return len(self._stamps)

    def apply(self, key: str, value: bytes | None) -> None:
        """Fold one record (a tombstone forgets its entry; a foreign key is skipped)."""
        parsed = topics.parse_destination_timestamp_key(key)
        if parsed is None:
            raise ValueError(f"not a {topics.DESTINATION_TIMESTAMPS} key: {key!r}")
        if not value:
            self._stamps.pop(parsed, None)
            return
        record = codec.decode("ConsumerTimestamp", value)
        self._stamps[parsed] = ConsumerStamp(
            int(record["committed_offset"]),
            int(record["timestamp_ms"]),
            int(record["committed_at_ms"]),
        )

    def of_cluster(self, source_cluster: str | None) -> list[tuple[tuple[str, str, int], Known]]:
        """The commits made on one source cluster, as positions (none for an unknown id)."""
        return [
            (
                (g, t, p),
                Known(s.committed_offset, s.committed_at_ms, s.committed_at_ms, ON_DESTINATION),
            )
            for (c, g, t, p), s in self._stamps.items()
            if c == source_cluster
        ]

    def stamp(
        self, source_cluster: str | None, group: str, topic: str, partition: int
    ) -> ConsumerStamp | None:
        return self._stamps.get((source_cluster or "", group, topic, partition))


def stamp_key(group: str, topic: str, partition: int) -> str:
    """The ``__consumer_timestamps`` key (schemas/README.md)."""
    return f"{group}/{topic}/{partition}"


def parse_stamp_key(key: str) -> tuple[str, str, int] | None:
    """``<group>/<topic>/<partition>`` split from the right (groups may contain ``/``)."""
    head, _, number = key.rpartition("/")
    group, _, topic = head.rpartition("/")
    if not group or not topic or not topics.is_decimal(number):
        return None
    return group, topic, int(number)
