"""Reading what a cluster holds from a point in time to its end, once: what a failover
counts and what a failback lists (docs/disaster-recovery.md)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.kafka import clients, reachable

PROBE_S = 5.0
READ_TIMEOUT_S = 60.0


def records_since(
    conf: dict[str, Any], topic_names: list[str], since_ms: int, group: str
) -> Iterator[Any]:
    """Every committed record of ``topic_names`` from ``since_ms`` (record time) to the end
    each partition had when it was reached; topics that do not exist are skipped."""
    consumer = clients.consumer(conf, **{"group.id": group})
    try:
        metadata = consumer.list_topics(timeout=PROBE_S)
        wanted = [
            KafkaTP(t, p, since_ms)
            for t in topic_names
            if t in metadata.topics
            for p in sorted(metadata.topics[t].partitions)
        ]
        if not wanted:
            return
        starts = consumer.offsets_for_times(wanted, timeout=READ_TIMEOUT_S)
        for tp in starts:
            low, high = consumer.get_watermark_offsets(
                KafkaTP(tp.topic, tp.partition), timeout=READ_TIMEOUT_S
            )
            start = tp.offset if tp.offset >= 0 else high
            yield from _scan(consumer, KafkaTP(tp.topic, tp.partition), max(start, low), high)
    finally:
        consumer.close()


def _scan(consumer: Any, where: KafkaTP, start: int, end: int) -> Iterator[Any]:
    if start >= end:
        return
    consumer.assign([KafkaTP(where.topic, where.partition, start)])
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while consumer.position([where])[0].offset < end:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{where.topic}/{where.partition}: not read to {end} in time")
            for msg in consumer.consume(1000, timeout=0.2):
                if msg.error() is None and msg.offset() < end:
                    yield msg
    finally:
        consumer.unassign()


def answers(conf: dict[str, Any]) -> bool:
    """Does the cluster answer? A refused connection says no at once (a gone dc-a), else
    a metadata request within PROBE_S says it."""
    if not reachable.accepts_connections(conf, PROBE_S):
        return False
    answered, _ = clients.probe(conf, PROBE_S)
    return answered is not None
