"""The Kafka sink's target topic (sink.py): made ready at start, and its end read back
when the sink takes the sorted partition, to correct the applied position by what the
target's records say."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.kafka import clients, tails
from crossfeed.kafka import topics as kafka_topics
from crossfeed.kafka.protocols import TransactionalProducer
from crossfeed.kafka.tails import TailReader
from crossfeed.kafka.targets import TargetTopics
from crossfeed.services.sink.reporting import SORTED_PARTITION
from crossfeed.services.sink.sorted_stream import (
    BadMarker,
    Position,
    classify,
    resume_position,
    written_position,
)
from crossfeed.wire import ids

log = logging.getLogger(__name__)

TRANSACTION_TIMEOUT_MS = 300_000  # a long source transaction keeps one Kafka transaction open


def ready_target(
    admin: Any, topic: str, feed: str, stop: threading.Event
) -> tuple[int, int | None]:
    """The target topic made when missing and read: its max.message.bytes and its time
    retention (time_retention_ms)."""
    # One partition: its consumers see the global order.
    kafka_topics.ensure_topic(admin, topic, 1)
    target = TargetTopics(admin).get(topic)
    deadline = time.monotonic() + 30
    while target is None and time.monotonic() < deadline and not stop.is_set():
        time.sleep(0.2)  # a topic just created may not be in the metadata yet
        target = TargetTopics(admin).get(topic)
    if target is None:
        raise RuntimeError(f"target topic {topic} is not readable after creating it")
    retention_ms = time_retention_ms(admin, topic)
    if target.partitions != 1:
        log.warning(
            "target topic %s has %d partitions; ordered feed %s writes partition 0 only",
            topic,
            target.partitions,
            feed,
        )
    return target.max_message_bytes, retention_ms


def check_target(
    target_conf: dict[str, Any],
    topics: tuple[str, str],
    feed: str,
    committed: tuple[Position, int],
) -> tuple[Position, int | None] | None:
    """The applied position checked against the end of the target topic (see
    sorted_stream.resume_position); ``topics``: the target topic and the sorted one;
    ``committed``: the applied position and the sorted offset after it.
    None when the target agrees (or cannot be read), else the position to resume after
    and, when transactions the position covers are not in the target, the sorted-stream
    offset to read from again."""
    target_topic, sorted_topic = topics
    applied, committed_offset = committed
    tail = None
    for attempt in range(3):  # the target may just be back: a few tries, then go on
        reader = TailReader(target_conf)
        try:
            tail = reader.read(KafkaTP(target_topic, 0), written_position)
            break
        except KafkaException as err:
            log.warning(
                "feed %s: could not read the end of %s (%s)%s",
                feed,
                target_topic,
                err.args[0].str() if err.args else err,
                "; trying again" if attempt < 2 else "; resuming from the applied position",
            )
            time.sleep(1.0)
        finally:
            reader.close()
    if tail is None:
        return None
    resumed = resume_position(applied, tail.committed, tail.aborted)
    if resumed == applied:
        return None
    rewind = None
    if resumed < applied:
        try:
            rewind = start_at_or_below(target_conf, sorted_topic, committed_offset, resumed)
        except KafkaException as err:
            log.error(
                "feed %s: transactions after %s are not in %s, but %s could not be read "
                "back to them (%s); resuming from the applied position",
                feed,
                resumed.describe(),
                target_topic,
                sorted_topic,
                err,
            )
            return None
    log.warning(
        "feed %s: the applied position says %s, the target %s says %s (%d aborted "
        "records); resuming after %s%s",
        feed,
        applied.describe(),
        target_topic,
        "nothing" if tail.committed is None else tail.committed.describe(),
        len(tail.aborted),
        resumed.describe(),
        "" if rewind is None else f", reading {sorted_topic} again from {rewind}",
    )
    return resumed, rewind


def start_at_or_below(
    conf: dict[str, Any], sorted_topic: str, committed_offset: int, position: Position
) -> int:
    """The offset of the newest start of a transaction (its ``begin``, or its inline seq 1)
    at or below ``position`` before the committed offset (the sequencer drops that
    transaction and applies what follows), or the sorted partition's start."""
    where = KafkaTP(sorted_topic, SORTED_PARTITION)
    reader = clients.consumer(conf, **{"group.id": "crossfeed-tail-check"})
    try:
        low, high = reader.get_watermark_offsets(where, timeout=10)
        end = committed_offset if committed_offset >= 0 else high
        for start in tails.backwards(low, end, 4096):
            starts: list[int] = [
                msg.offset()
                for msg in tails.scan(reader, where, start, end)
                if _starts_at_or_below(msg.headers(), position)
            ]
            if starts:
                return max(starts)
        return int(low)
    finally:
        reader.close()


def time_retention_ms(admin: Any, topic: str) -> int | None:
    """``topic``'s time retention in ms when the broker deletes its records by their own
    timestamps (``cleanup.policy`` with ``delete``, CreateTime, ``retention.ms`` >= 0);
    None otherwise, or when its configs cannot be read (the warning is only advice)."""
    keys = ("cleanup.policy", "message.timestamp.type", "retention.ms")
    try:
        policy, stamps, retention = kafka_topics.effective_configs(admin, topic, keys).values()
    except KafkaException as err:
        log.info("configs of target topic %s not read (%s)", topic, err)
        return None
    if "delete" not in (policy or "delete") or stamps == "LogAppendTime" or retention is None:
        return None
    return int(retention) if int(retention) >= 0 else None


def _starts_at_or_below(hdrs: list[Any] | None, position: Position) -> bool:
    try:
        marker = classify(hdrs)
    except BadMarker:
        return False
    return marker.starts and marker.position <= position


def target_producer(conf: dict[str, Any], feed: str, instance_id: str) -> TransactionalProducer:
    """The sink instance's transactional producer into the target cluster."""
    return clients.transactional_producer(
        conf,
        ids.sink_transactional_id(feed, instance_id),
        **{
            "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
            "linger.ms": 5,
            "batch.size": 1 << 20,
            "queue.buffering.max.kbytes": 131072,
        },
    )


def warn_if_expired(
    where: tuple[str, str], retention_ms: int | None, newest_ts_ms: int, warned_at: float
) -> float:
    """Target records keep their source timestamps, and the broker's time retention
    counts from those: replaying history older than the target's ``retention.ms``
    writes records the broker deletes at its next retention check (within minutes).
    Nothing crossfeed can undo afterwards, so it says so, once a minute at most
    (``where``: the feed and the target topic; ``warned_at``: when it last said it;
    returns when it last said it now)."""
    if retention_ms is None or newest_ts_ms < 0:
        return warned_at
    feed, topic = where
    now = time.time()
    if newest_ts_ms >= now * 1000 - retention_ms:
        return warned_at
    if now - warned_at < 60:
        return warned_at
    log.warning(
        "feed %s writes records with source timestamps older than the retention.ms "
        "(%d) of target topic %s (the newest just committed: %s); the broker "
        "deletes them at its next retention check: give the topic a longer "
        "retention.ms (-1 keeps everything) to keep this history",
        feed,
        retention_ms,
        topic,
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(newest_ts_ms / 1000)),
    )
    return now
