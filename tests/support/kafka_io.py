"""Reading whole topics back in tests: every partition from the start to its end."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Message, TopicPartition

from crossfeed.kafka import clients


def end_offsets(config: dict[str, Any], topic: str) -> dict[int, int]:
    """High watermark per partition (read_committed: the last stable offset)."""
    consumer = clients.consumer(config, **{"group.id": "crossfeed-test-reader"})
    try:
        meta = consumer.list_topics(topic, timeout=10)
        partitions = sorted(meta.topics[topic].partitions)
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
    finally:
        consumer.close()


def read_all(
    config: dict[str, Any],
    topic: str,
    *,
    expect: int | None = None,
    timeout_s: float = 60.0,
    isolation: str = "read_committed",
) -> dict[int, list[Message]]:
    """All records of ``topic`` by partition, in offset order.

    Reads up to the end offsets taken at the start; with ``expect``, keeps reading until
    that many data records arrived (or the timeout passes, returning what it has).
    """
    consumer = clients.consumer(
        config, **{"group.id": "crossfeed-test-reader", "isolation.level": isolation}
    )
    try:
        meta = consumer.list_topics(topic, timeout=10)
        partitions = sorted(meta.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        }
        out: dict[int, list[Message]] = {p: [] for p in partitions}
        count = 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            batch = consumer.consume(10_000, timeout=0.5)
            for msg in batch:
                if msg.error():
                    continue
                out[msg.partition()].append(msg)
                count += 1
            if expect is not None:
                if count >= expect:
                    break
            elif all(
                consumer.position([TopicPartition(topic, p)])[0].offset >= ends[p] or ends[p] == 0
                for p in partitions
            ):
                break
        return out
    finally:
        consumer.close()
