"""``_crossfeed.checkpoints`` on a feed's target: translated group offsets (GroupCheckpoint).

Key ``<feed>/<group>/<topic>/<partition>`` (schemas/README.md); compacted, so the newest
translation of every group partition survives. Kafka group ids are never empty, so the
group ``""`` is free: the translator uses it for the feed's own per-partition row — the
source end offset it last saw (``source_offset``), the replicated frontier on the target
(``target_offset``) and the copyable records between them (``gap_records``, -1 unknown)
— so that a failover decided after a coordinator restart, with the source already gone,
still knows what the source held.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import OFFSET_BEGINNING, KafkaError, TopicPartition

from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.translation.kafka_io import shared_admin
from crossfeed.wire import codec, topics

log = logging.getLogger(__name__)

FEED_ROW: Final = ""
"""The group name of a feed's own per-partition row."""


def checkpoint_key(feed: str, group: str, topic: str, partition: int) -> bytes:
    return f"{feed}/{group}/{topic}/{partition}".encode()


def ensure_topic(conf: Mapping[str, Any]) -> None:
    kafka_topics.ensure_internal(shared_admin(conf).client(), topics.CHECKPOINTS)


@dataclass(frozen=True, slots=True)
class StoredCheckpoint:
    """One GroupCheckpoint as read back."""

    feed: str
    group: str
    topic: str
    partition: int
    source_offset: int
    target_topic: str
    target_partition: int
    target_offset: int
    exact: bool
    gap_records: int
    source_cluster: str
    translated_at_ms: int
    source_log_start: int = -1

    @classmethod
    def decode(cls, value: bytes) -> StoredCheckpoint:
        return cls(**codec.decode("GroupCheckpoint", value))


def read_checkpoints(
    conf: Mapping[str, Any], feed: str, timeout_s: float = 30.0
) -> dict[tuple[str, str, int], StoredCheckpoint]:
    """The newest checkpoint of every (group, topic, partition) of ``feed`` (the feed's
    own rows under group ``""``). Empty if the topic does not exist."""
    consumer = clients.consumer(
        dict(conf), **{"group.id": "crossfeed-checkpoint-reader", "enable.partition.eof": True}
    )
    out: dict[tuple[str, str, int], StoredCheckpoint] = {}
    prefix = f"{feed}/".encode()
    unreadable = 0
    try:
        info = consumer.list_topics(topics.CHECKPOINTS, timeout=10).topics.get(topics.CHECKPOINTS)
        if info is None or info.error is not None or not info.partitions:
            return out
        parts = sorted(info.partitions)
        consumer.assign([TopicPartition(topics.CHECKPOINTS, p, OFFSET_BEGINNING) for p in parts])
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(parts):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topics.CHECKPOINTS} within {timeout_s:.0f}s")
            batch: list[Any] = consumer.consume(1000, timeout=0.2)
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_end.add(msg.partition())
                    continue
                at_end.discard(msg.partition())
                key = msg.key() or b""
                if not key.startswith(prefix):
                    continue
                value = msg.value()
                if not value:
                    continue
                try:
                    row = StoredCheckpoint.decode(value)
                except codec.CodecError:
                    # e.g. written by an older crossfeed (another schema version): its key's
                    # next checkpoint replaces it; the others are still worth having.
                    unreadable += 1
                    continue
                if row.feed == feed:
                    out[(row.group, row.topic, row.partition)] = row
    finally:
        consumer.close()
    if unreadable:
        log.warning(
            "feed %s: %d checkpoint(s) in %s could not be decoded and were left out",
            feed,
            unreadable,
            topics.CHECKPOINTS,
        )
    return out
