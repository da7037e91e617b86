"""The translation of one group partition: its committed offset, through the feed's runs,
to an offset on the target (the rules of ``rules.py``, with the I/O they may ask for)."""

from __future__ import annotations

from typing import Any

from crossfeed.core import gaps
from crossfeed.core.partitions import TopicPartition
from crossfeed.feeds import FeedSpec
from crossfeed.translation import kafka_io
from crossfeed.translation.destination import Destination
from crossfeed.translation.feed_books import FeedBooks
from crossfeed.translation.kafka_io import TP, Unreachable
from crossfeed.translation.latest import Known
from crossfeed.translation.results import PartitionTranslation
from crossfeed.translation.rules import LogStart, decide
from crossfeed.translation.scan import RangeScan, Seen, classify
from crossfeed.translation.source import SourceView, now_ms


class PartitionTranslator:
    """Translates group partitions of one feed (the owner locks)."""

    def __init__(
        self, feed: FeedSpec, books: FeedBooks, source: SourceView, destination: Destination
    ) -> None:
        self.feed = feed
        self.books = books
        self.source = source
        self.destination = destination

    def translate(
        self, group: str, topic: str, partition: int, known: Known
    ) -> PartitionTranslation:
        offset = known.offset
        with self.books.syncs.locked() as book:
            entry = book.get(self.feed.name, topic, partition)
            if entry is not None and self.source.cluster_id not in (None, entry.source_cluster):
                entry = None  # runs of another source cluster say nothing about this one
            found = (
                entry.index.translate(offset) if entry is not None and len(entry.index) else None
            )
            target = (entry.target_topic, entry.target_partition) if entry else None
            next_copied = entry.index.next_copied(offset) if entry is not None else None
        target = target or (self.feed.target_topic(topic), partition)
        start = self.source.starts.get((topic, partition))
        log_start = None
        if start is not None:
            tp = TopicPartition(topic, partition)
            acked = gaps.key_of(tp, offset) in gaps.acknowledged(self.feed.config.gap_acknowledged)
            policy = self.feed.config.gap_policy
            log_start = LogStart(tp, start, next_copied, policy, acked)
        with self.books.stamps.locked() as stamps:
            stamp = stamps.get(group, topic, partition)
        if stamp is None:  # the copy on the target, if the group has the opt-in
            with self.books.recorded.locked() as recorded:
                stamp = recorded.stamp(self.source.cluster_id, group, topic, partition)
        outcome = decide(offset, found, stamp, _Lookups(self, topic, partition, target), log_start)
        return PartitionTranslation(
            group=group,
            topic=topic,
            partition=partition,
            source_offset=offset,
            target_topic=target[0],
            target_partition=target[1],
            target_offset=outcome.target_offset,
            exact=outcome.exact,
            method=outcome.method.value,
            gap=outcome.gap,
            consumer_timestamp_ms=stamp.timestamp_ms if stamp is not None else -1,
            translated_at_ms=now_ms(),
            known_from=known.via,
            known_at_ms=known.seen_at_ms,
            committed_at_ms=known.committed_at_ms,
            past_recorded=known.past_recorded,
            source_log_start=-1 if start is None else start,
            lost=outcome.lost,
            held=outcome.held,
        )

    def scan(
        self, topic: str, partition: int, start: int, end: int, limit: int
    ) -> RangeScan | None:
        """A bounded, cached read of source records, classified for this feed's target."""
        target_topic, target_partition = self.books.target_of(topic, partition)
        target_id = self.destination.cluster_id or ""

        def kind(msg: Any) -> Seen:
            return classify(
                msg.offset(),
                msg.headers(),
                target_cluster_id=target_id,
                target_topic=target_topic,
                target_partition=target_partition,
                timestamp_ms=msg.timestamp()[1],
            )

        return self.source.scan(topic, partition, start, end, limit, kind)

    def by_timestamp(self, target: TP, timestamp_ms: int) -> int | None:
        try:
            return kafka_io.offset_for_time(self.destination.admin, target, timestamp_ms)
        except Unreachable:
            return None


class _Lookups:
    """The I/O :func:`decide` may ask for, bound to one partition."""

    def __init__(
        self, translator: PartitionTranslator, topic: str, partition: int, target: TP
    ) -> None:
        self.translator = translator
        self.topic = topic
        self.partition = partition
        self.target = target

    def scan(self, start: int, end: int, limit: int) -> RangeScan | None:
        return self.translator.scan(self.topic, self.partition, start, end, limit)

    def by_timestamp(self, timestamp_ms: int) -> int | None:
        return self.translator.by_timestamp(self.target, timestamp_ms)
