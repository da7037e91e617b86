"""The Debezium reader's data partitions (debezium_reader.py): the feed's tables'
partitions, each with what was read and not yet emitted, in order; rewound and paused
when too much waits (MAX_BUFFER_BYTES)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.core.debezium_order import Waiting
from crossfeed.feeds import FeedSpec
from crossfeed.wire import debezium

log = logging.getLogger(__name__)

Key = tuple[str, int]  # (topic, partition), as a record gives it


@dataclass
class _Partition:
    """A data partition: what was read and not yet emitted, in order."""

    name: str  # "topic/partition": the joiner's name for it
    tp: KafkaTP
    buffer: Waiting[Any] = field(default_factory=deque)
    next_offset: int = -1  # the first offset not yet emitted or dropped (-1: unknown)
    read_next: int = -1  # the offset after the last one read
    paused: bool = False
    streamed: bool = False  # a streamed event was read: its snapshot rows are all behind


class DataPartitions:
    def __init__(self, feed: FeedSpec, txn_topic: str) -> None:
        self.feed = feed
        self.txn_topic = txn_topic
        self.parts: dict[Key, _Partition] = {}
        self.buffers: dict[str, Waiting[Any]] = {}  # each part's buffer, by its name
        self.buffered = 0  # bytes of values waiting in the buffers

    def of_counts(self, counts: dict[str, int]) -> list[Key]:
        """The feed's tables' partitions among the source's topics (``counts``)."""
        return [
            (topic, p)
            for topic in self.feed.selector.select(counts)
            if topic != self.txn_topic
            for p in range(counts[topic])
        ]

    def add(self, key: Key, offset: int) -> KafkaTP:
        tp = KafkaTP(key[0], key[1], offset)
        part = self.parts[key] = _Partition(f"{key[0]}/{key[1]}", KafkaTP(key[0], key[1]))
        part.next_offset = offset if offset >= 0 else -1
        self.buffers[part.name] = part.buffer  # what drain() decides on, by partition name
        return tp

    def take(self, msg: Any, event_of: Callable[[bytes | None], debezium.DataEvent | None]) -> None:
        """A data record read: into its partition's buffer, until the head allows it."""
        part = self.parts.get((msg.topic(), msg.partition()))
        if part is None or part.paused or msg.offset() < part.read_next:
            # fetched before a pause, or again: librdkafka drops what was fetched
            # before a seek, so what is read after the rewind starts at its offset
            return
        if part.next_offset < 0:
            part.next_offset = msg.offset()
        part.read_next = msg.offset() + 1
        ts_us = max(msg.timestamp()[1], 0) * 1000
        event = event_of(msg.value())
        part.streamed = part.streamed or (event is not None and event.xid is not None)
        part.buffer.append((msg, event, ts_us))
        self.buffered += len(msg.value() or b"")

    def drained(self, msg: Any) -> None:
        """``msg`` left its buffer (emitted or dropped)."""
        part = self.parts[(msg.topic(), msg.partition())]
        part.next_offset = msg.offset() + 1
        self.buffered -= len(msg.value() or b"")

    def spill(self, consumer: Any) -> None:
        """Too much waits for its END: rewind the fullest partition and pause it."""
        part = max(self.parts.values(), key=lambda p: len(p.buffer))
        first = part.buffer[0][0].offset()
        for msg, _, _ in part.buffer:
            self.buffered -= len(msg.value() or b"")
        part.buffer.clear()
        part.paused = True
        consumer.pause([part.tp])
        consumer.seek(KafkaTP(part.tp.topic, part.tp.partition, first))
        part.next_offset = part.read_next = first
        log.info(
            "debezium reader of feed %s: %s rewound to %d until its transaction is the head",
            self.feed.name,
            part.name,
            first,
        )

    def resume(self, consumer: Any) -> None:
        paused = [p for p in self.parts.values() if p.paused]
        for part in paused:
            part.paused = False
        if paused:
            consumer.resume([p.tp for p in paused])

    def ends(self, consumer: Any) -> dict[Key, int]:
        """Each partition's current end (where its snapshot rows end, at the signal)."""
        until = {}
        for key, part in self.parts.items():
            _, high = consumer.get_watermark_offsets(part.tp, timeout=10, cached=False)
            until[key] = high
        return until

    def past(self, until: dict[Key, int]) -> bool:
        """Every partition read up to ``until``, or showing a streamed event (snapshot
        rows come first in a partition)."""
        for key, high in until.items():
            part = self.parts[key]
            if high > max(part.read_next, part.next_offset, 0) and not part.streamed:
                return False
        return True

    def positions(self) -> list[KafkaTP]:
        return [
            KafkaTP(part.tp.topic, part.tp.partition, part.next_offset)
            for part in self.parts.values()
            if part.next_offset >= 0
        ]
