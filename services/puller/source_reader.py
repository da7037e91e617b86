"""The instance's one consumer of the source: it reads every source partition of the
instance's tasks (never joins a group: partitions are assigned by the tasks)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.core.partitions import TopicPartition
from crossfeed.kafka import clients
from crossfeed.kafka.reachability import Reachability
from crossfeed.wire import ids

SOURCE_UP_WINDOW_S = 3.0  # statistics arrive every second; allow for two missing


class SourceReader:
    def __init__(self, source_conf: dict[str, Any], source: Reachability) -> None:
        self.source_conf = source_conf
        self.source = source
        self.consumer: Any = None

    def open(self, feed_name: str) -> None:
        self.consumer = clients.consumer(
            self.source_conf,
            **{
                "group.id": ids.puller_group(feed_name),  # never joined: assign only
                "queued.max.messages.kbytes": 32768,  # bounded prefetch
                "fetch.wait.max.ms": 100,
                # librdkafka's default (1 MiB per partition per fetch) held one reader to
                # ~100k records/s of 1 KiB with this prefetch bound; 8 MiB: ~600k.
                "max.partition.fetch.bytes": 8 << 20,
                # A position below the log start (records deleted before they were
                # copied) is an error to report, never a silent jump (SourceGaps).
                "auto.offset.reset": "error",
                # Broker states once a second: is the source reachable at all?
                **self.source.client_conf(),
            },
        )

    def close(self) -> None:
        if self.consumer is not None:
            self.consumer.close()
            self.consumer = None

    def consume(self, most: int, timeout: float) -> list[Any]:
        batch: list[Any] = self.consumer.consume(most, timeout=timeout)
        self.source.polled()
        return batch

    def assign(self, starts: list[KafkaTP]) -> None:
        if starts:
            self.consumer.incremental_assign(starts)

    def unassign(self, tps: Iterable[TopicPartition]) -> None:
        kafka_tps = [KafkaTP(tp.topic, tp.partition) for tp in tps]
        if kafka_tps and self.consumer is not None:
            self.consumer.incremental_unassign(kafka_tps)

    def reassign(self, tp: TopicPartition, offset: int, *, assigned: bool = True) -> None:
        """Read ``tp`` from ``offset`` (a partition in librdkafka's error state takes no
        seek: it is assigned afresh)."""
        if assigned:
            self.unassign([tp])
        self.consumer.incremental_assign([KafkaTP(tp.topic, tp.partition, offset)])

    def watermarks(self, tp: TopicPartition, *, cached: bool) -> tuple[int, int]:
        kp = KafkaTP(tp.topic, tp.partition)
        if cached:
            low, high = self.consumer.get_watermark_offsets(kp, cached=True)
        else:
            low, high = self.consumer.get_watermark_offsets(kp, timeout=10, cached=False)
        return low, high

    def position(self, tp: TopicPartition) -> int:
        offset: int = self.consumer.position([KafkaTP(tp.topic, tp.partition)])[0].offset
        return offset

    def positions(
        self, tps: list[TopicPartition]
    ) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
        """The reader's positions for ``tps``, and which ones are caught up."""
        kafka_tps = [KafkaTP(tp.topic, tp.partition) for tp in tps]
        fetched = self.consumer.position(kafka_tps) if kafka_tps else []
        positions_now = {tp: kp.offset for tp, kp in zip(tps, fetched, strict=True)}
        caught_up = set()
        # A partition is caught up only if the source answers now: its cached high
        # watermark says nothing about records written while it is out of reach.
        source_up = self.source.up(SOURCE_UP_WINDOW_S)
        for tp, kp in zip(tps, kafka_tps, strict=True):
            if not source_up:
                break
            _, high = self.consumer.get_watermark_offsets(kp, cached=True)
            if high >= 0 and positions_now[tp] >= high:
                caught_up.add(tp)
        return positions_now, caught_up
