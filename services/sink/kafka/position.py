"""Where the Kafka sink resumes (sink.py): the applied position travels as the metadata
of the sink group's committed offset on the sorted stream."""

from __future__ import annotations

import logging

from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.kafka.protocols import GroupConsumer
from crossfeed.services.sink.reporting import SORTED_PARTITION
from crossfeed.services.sink.sorted_stream import Applied

log = logging.getLogger(__name__)


def group_position(consumer: GroupConsumer, sorted_topic: str, feed: str) -> tuple[Applied, int]:
    """The committed position and offset (-1: none), as the group coordinator has them."""
    tp = KafkaTP(sorted_topic, SORTED_PARTITION)
    committed = consumer.committed([tp], timeout=10)[0]
    try:
        applied = Applied.decode(committed.metadata)
    except ValueError as err:
        log.warning("feed %s: %s; starting with no position", feed, err)
        applied = Applied()
    return applied, committed.offset if committed.offset >= 0 else -1


def seek(consumer: GroupConsumer, sorted_topic: str, offset: int) -> None:
    """The sorted partition read again from ``offset`` (-1: its start)."""
    if offset < 0:
        low, _ = consumer.get_watermark_offsets(KafkaTP(sorted_topic, SORTED_PARTITION), timeout=10)
        offset = low
    consumer.seek(KafkaTP(sorted_topic, SORTED_PARTITION, offset))
