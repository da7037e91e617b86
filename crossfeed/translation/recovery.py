"""The recovery point of one feed, per source partition: the records known on the source
that the target lacks (the rules are ``rpo.py``'s; this reads what they need)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from crossfeed.translation.books import Frontier
from crossfeed.translation.feed_books import FeedBooks
from crossfeed.translation.kafka_io import TP, Unreachable
from crossfeed.translation.partition import PartitionTranslator
from crossfeed.translation.reader import RangeReader
from crossfeed.translation.rpo import PartitionRpo, partition_rpo
from crossfeed.translation.rules import FRONTIER_SCAN_LIMIT
from crossfeed.translation.source import SourceView


class RecoveryPoint:
    """Reads the recovery point of one feed's partitions (the owner locks)."""

    def __init__(
        self,
        books: FeedBooks,
        source: SourceView,
        partitions: PartitionTranslator,
        target_reader: RangeReader,
    ) -> None:
        self.books = books
        self.source = source
        self.partitions = partitions
        self.target_reader = target_reader

    def rows(
        self, partitions: Iterable[TP] | None, read_target: bool, floors: Mapping[TP, int]
    ) -> list[PartitionRpo]:
        """See :meth:`Translator.rpo`."""
        frontiers: dict[TP, Frontier | None] = {
            (e.topic, e.partition): e.frontier() for e in self.books.entries(self.source.cluster_id)
        }
        if partitions is not None:
            wanted = sorted(set(partitions))
            frontiers = {tp: frontiers.get(tp) for tp in wanted}
            self.source.try_refresh_ends(wanted)
        else:
            for tp in self.source.ends:
                if self.books.wanted(tp[0]):
                    frontiers.setdefault(tp, None)
        consumed: dict[TP, int] = {}
        for (_, t, p), stamp in self.books.stamp_items():
            consumed[(t, p)] = max(consumed.get((t, p), -1), stamp.timestamp_ms)
        return [
            self._row(tp, frontier, floors.get(tp, 0), consumed, read_target)
            for tp, frontier in sorted(frontiers.items())
        ]

    def _row(
        self,
        tp: TP,
        frontier: Frontier | None,
        floor: int,
        consumed: Mapping[TP, int],
        read_target: bool,
    ) -> PartitionRpo:
        known = self.source.ends.get(tp)
        start = max(frontier.source_next if frontier is not None else 0, floor)
        scan = None
        if known is not None and known.end > start:
            scan = self.partitions.scan(tp[0], tp[1], start, known.end, FRONTIER_SCAN_LIMIT)
        newest = max(known.max_ts_ms if known is not None else -1, consumed.get(tp, -1))
        last_replicated = -1
        if read_target and frontier is not None:
            target_topic, target_partition = self.books.target_of(*tp)
            try:
                last_replicated = self.target_reader.record_timestamp(
                    target_topic, target_partition, frontier.target_next - 1
                )
            except Unreachable:
                last_replicated = -1
        return partition_rpo(
            tp[0],
            tp[1],
            frontier=frontier,
            source_end=known.end if known is not None else None,
            scan=scan,
            newest_source_ts_ms=newest,
            last_replicated_ts_ms=last_replicated,
            known_at_ms=known.seen_at_ms if known is not None else 0,
            floor=floor,
        )
