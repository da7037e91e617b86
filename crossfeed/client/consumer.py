"""Consumer helpers: consumer timestamps for failover, and the user's own headers.

:class:`TimestampedConsumer` is a ``confluent_kafka.Consumer`` that, on every commit
(synchronous, asynchronous or automatic), records ``(group, topic, partition, committed
offset, timestamp of the last record consumed before that offset)`` in
``__consumer_timestamps`` on the cluster it consumes from — Replicator's
``ConsumerTimestampsInterceptor``, for Python. crossfeed's coordinator reads them to
translate the group's offset where no offset sync covers it, and to know commits made
just before the cluster was lost. Use it exactly like a ``Consumer``::

    consumer = TimestampedConsumer({
        "bootstrap.servers": "dc-a:9092",
        "group.id": "billing",
        # the timestamps producer: connection settings are taken from the consumer's
        # unless given here, e.g. other credentials:
        "timestamps.producer.sasl.username": "billing-ts",
    })

Keys prefixed ``timestamps.producer.`` configure the producer of the timestamps;
``timestamps.topic.num.partitions`` and ``timestamps.topic.replication.factor``
(Replicator's names) the compacted topic, created if it is missing. The principal needs
WRITE and DESCRIBE on ``__consumer_timestamps`` (and CREATE, or the topic made by hand).

Headers: copied records carry ``crossfeed-*`` headers (provenance, docs/design.md). Code that
lists every header should use :func:`user_headers`, which leaves them out — as Replicator
asks consumers to skip ``__replicator_id``. Asking for one header by name needs no change.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from confluent_kafka import (
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from crossfeed.client.connection import connection_settings, create_topic
from crossfeed.client.destination import (
    DestinationRecorder,
    DestinationSettings,
    split_destination,
)
from crossfeed.kafka import clients
from crossfeed.wire import codec, headers, topics

log = logging.getLogger(__name__)

PRODUCER_PREFIX: Final = "timestamps.producer."
TOPIC_PREFIX: Final = "timestamps.topic."
DEFAULT_PARTITIONS: Final = 16
FLUSH_S: Final = 5.0
"""A synchronous commit waits this long at most for its timestamps to be written."""
MAX_REMEMBERED: Final = 100_000
"""Consumed records remembered per partition between commits (offset and timestamp)."""

Header = tuple[str, bytes | None]


def user_headers(source: Message | Sequence[Header] | None) -> list[Header]:
    """The headers of a record (or a header list) without crossfeed's, in order,
    duplicates kept: what the producing application wrote."""
    found: Any = (source.headers() if isinstance(source, Message) else source) or []
    return [(str(h[0]), _as_bytes(h[1])) for h in found if not headers.is_crossfeed_header(h[0])]


def _as_bytes(value: Any) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


def is_watermark(msg: Message) -> bool:
    """True for a ``resolved`` watermark written by :class:`~crossfeed.client.producer.
    ChangeProducer` (not application data)."""
    found: Any = msg.headers() or []
    return any(
        h[0] == headers.TYPE and _as_bytes(h[1]) == headers.TYPE_RESOLVED.encode() for h in found
    )


def split_config(
    config: Mapping[str, Any],
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(consumer, timestamps producer, timestamps topic) settings of a wrapper config."""
    consumer: dict[str, Any] = {}
    producer: dict[str, Any] = {}
    topic: dict[str, Any] = {}
    for key, value in config.items():
        if key.startswith(PRODUCER_PREFIX):
            producer[key[len(PRODUCER_PREFIX) :]] = value
        elif key.startswith(TOPIC_PREFIX):
            topic[key[len(TOPIC_PREFIX) :]] = value
        else:
            consumer[key] = value
    inherited = connection_settings(consumer)  # the timestamps producer's cluster is the same
    defaults = {"enable.idempotence": True, "acks": "all", "linger.ms": 5}
    return consumer, {**defaults, **inherited, **producer}, topic


class _Consumed:
    """Offsets and timestamps of the records of one partition consumed since its last
    commit, to find the one just before a committed offset."""

    __slots__ = ("offsets", "timestamps")

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.timestamps: list[int] = []

    def add(self, offset: int, timestamp_ms: int) -> None:
        if self.offsets and offset <= self.offsets[-1]:
            # A seek backwards (or a rebalance): earlier knowledge is about other reads.
            self.offsets.clear()
            self.timestamps.clear()
        self.offsets.append(offset)
        self.timestamps.append(timestamp_ms)
        if len(self.offsets) > MAX_REMEMBERED:
            del self.offsets[: MAX_REMEMBERED // 2]
            del self.timestamps[: MAX_REMEMBERED // 2]

    def before(self, committed: int) -> int | None:
        """Timestamp of the last consumed record below ``committed``; forgets older ones."""
        i = bisect.bisect_left(self.offsets, committed) - 1
        if i < 0:
            return None
        timestamp = self.timestamps[i]
        del self.offsets[:i]
        del self.timestamps[:i]
        return timestamp


class _Recorder:
    """Writes the consumer timestamps of one group.

    It is the consumer's ``on_commit`` callback and holds no reference to the consumer:
    a consumer ↔ wrapper cycle would leave the clients to Python's cycle collector,
    which may run on a librdkafka thread — and a client destroyed there aborts the
    process.
    """

    def __init__(
        self,
        group: str,
        producer_conf: dict[str, Any],
        topic_conf: dict[str, Any],
        user_on_commit: Callable[[Any, list[TopicPartition]], None] | None,
        destination: DestinationSettings | None = None,
    ) -> None:
        self.group = group
        self.user_on_commit = user_on_commit
        self.partitions = int(topic_conf.get("num.partitions", DEFAULT_PARTITIONS))
        self.replication = int(topic_conf.get("replication.factor", -1))
        admin_conf = connection_settings(producer_conf)
        # Kept for the consumer's life, for the same reason (an admin client dropped while
        # librdkafka completes one of its futures is destroyed on librdkafka's thread).
        logger = producer_conf.get("logger")  # the application's, if it gave one
        self.admin = AdminClient(clients.logged(admin_conf, "admin", logger))
        self.producer = Producer(clients.logged(producer_conf, "producer"))
        self.consumed: dict[tuple[str, int], _Consumed] = {}
        self.topic_ready = False
        self.destination = (
            DestinationRecorder(destination, self.partitions, self.replication)
            if destination is not None
            else None
        )
        self.source_cluster: str | None = None

    def remember(self, msg: Message) -> None:
        where = (str(msg.topic()), int(msg.partition() or 0))
        consumed = self.consumed.get(where)
        if consumed is None:
            consumed = self.consumed[where] = _Consumed()
        consumed.add(int(msg.offset() or 0), int(msg.timestamp()[1]))

    def on_commit(self, err: Any, partitions: list[TopicPartition]) -> None:
        if err is None:
            self.record(partitions)
        if self.user_on_commit is not None:
            self.user_on_commit(err, partitions)

    def record(self, partitions: list[TopicPartition]) -> None:
        """Record the commits (successful ones) of ``partitions``; with the opt-in, also
        on the destination, waiting (bounded) until it has them."""
        now = int(time.time() * 1000)
        recorded = False
        for tp in partitions:
            if tp.error is not None or tp.offset < 0:
                continue
            consumed = self.consumed.get((tp.topic, tp.partition))
            timestamp = consumed.before(tp.offset) if consumed is not None else None
            value = codec.encode(
                "ConsumerTimestamp",
                {
                    "group": self.group,
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "committed_offset": tp.offset,
                    "timestamp_ms": -1 if timestamp is None else timestamp,
                    "committed_at_ms": now,
                },
            )
            if timestamp is not None:  # else nothing consumed below it by this instance
                self.produce(f"{self.group}/{tp.topic}/{tp.partition}".encode(), value)
            recorded = self.record_on_destination(tp, value) or recorded
        if recorded and self.destination is not None:
            self.destination.wait()

    def record_on_destination(self, tp: TopicPartition, value: bytes) -> bool:
        """Queue the commit's record on the destination (the opt-in); False if off, or
        if the source's cluster.id (part of the key) cannot be learnt now."""
        if self.destination is None:
            return False
        cluster = self.cluster_id()
        if cluster is None:
            self.destination.count("failed")
            log.warning("commit of %s not recorded on the destination: no cluster.id", tp)
            return False
        key = topics.destination_timestamp_key(cluster, self.group, tp.topic, tp.partition)
        self.destination.record(key, value)
        return True

    def cluster_id(self) -> str | None:
        """The source's cluster.id (asked once; the source just answered a commit)."""
        if self.source_cluster is None:
            try:
                found = self.admin.list_topics(timeout=5).cluster_id
            except KafkaException as err:
                log.warning("cannot learn the cluster.id of the consumer's cluster: %s", err)
                return None
            self.source_cluster = str(found) if found else None
        return self.source_cluster

    def poll(self) -> None:
        self.producer.poll(0)
        if self.destination is not None:
            self.destination.poll()

    def flush(self) -> None:
        self.producer.flush(FLUSH_S)
        if self.destination is not None:
            self.destination.close(FLUSH_S)

    def produce(self, key: bytes, value: bytes) -> None:
        if not self.topic_ready and not self.ensure_topic():
            return
        try:
            self.producer.produce(
                topics.CONSUMER_TIMESTAMPS, key=key, value=value, on_delivery=_log_failure
            )
        except (BufferError, KafkaException) as err:
            log.warning("consumer timestamp of %s not recorded: %s", key.decode(), err)

    def ensure_topic(self) -> bool:
        """Create the compacted ``__consumer_timestamps`` if missing; False if that failed."""
        topic = NewTopic(
            topics.CONSUMER_TIMESTAMPS,
            num_partitions=self.partitions,
            replication_factor=self.replication,
            config={"cleanup.policy": "compact"},
        )
        self.topic_ready = create_topic(self.admin, topic, 10, "the consumer's cluster")
        return self.topic_ready


class TimestampedConsumer:
    """A ``confluent_kafka.Consumer`` that records consumer timestamps at each commit.

    Every ``Consumer`` method is available; ``poll``, ``consume``, ``commit`` and
    ``close`` are wrapped. A failure to record timestamps never fails the consumer: it is
    logged (the group's offsets are committed either way).
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        rest, destination = split_destination(config)
        consumer_conf, producer_conf, topic_conf = split_config(rest)
        if "logger" in consumer_conf:  # librdkafka's lines of every client to the same logger
            producer_conf.setdefault("logger", consumer_conf["logger"])
        group = consumer_conf.get("group.id")
        if not group:
            raise ValueError("TimestampedConsumer needs a group.id: timestamps are per group")
        self.group: str = str(group)
        self._recorder = _Recorder(
            self.group,
            producer_conf,
            topic_conf,
            consumer_conf.pop("on_commit", None),
            destination,
        )
        consumer_conf["on_commit"] = self._recorder.on_commit
        self._consumer = Consumer(clients.logged(consumer_conf, "consumer"))
        self._recorder.ensure_topic()

    def destination_stats(self) -> dict[str, int] | None:
        """The opt-in's counts — ``recorded`` (acknowledged by the destination),
        ``failed`` (never will be), ``waits_expired`` (commits that stopped waiting) —
        or None when it is off."""
        destination = self._recorder.destination
        return dict(destination.stats) if destination is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)

    def poll(self, timeout: float = -1) -> Message | None:
        msg = self._consumer.poll(timeout)
        if msg is not None and msg.error() is None:
            self._recorder.remember(msg)
        self._recorder.poll()
        return msg

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        batch: list[Message] = self._consumer.consume(num_messages, timeout)
        for msg in batch:
            if msg.error() is None:
                self._recorder.remember(msg)
        self._recorder.poll()
        return batch

    def commit(
        self,
        message: Message | None = None,
        offsets: list[TopicPartition] | None = None,
        asynchronous: bool = True,
    ) -> list[TopicPartition] | None:
        """Commit like ``Consumer.commit``; a synchronous commit also waits (briefly) until
        its timestamps are written, so they survive losing the cluster right after — with
        the opt-in, on the destination first (at most ``timestamps.destination.wait.ms``).
        """
        kwargs: dict[str, Any] = {"asynchronous": asynchronous}
        if message is not None:
            kwargs["message"] = message
        if offsets is not None:
            kwargs["offsets"] = offsets
        result: list[TopicPartition] | None = self._consumer.commit(**kwargs)
        if not asynchronous and result:
            # Synchronous commits do not go through on_commit.
            self._recorder.record(result)
            self._recorder.producer.flush(FLUSH_S)
        return result

    def close(self) -> None:
        self._consumer.close()  # may commit (auto-commit): on_commit runs first
        self._recorder.flush()


def _log_failure(err: Any, msg: Message) -> None:
    if err is not None:
        log.warning("consumer timestamp not written to %s: %s", topics.CONSUMER_TIMESTAMPS, err)
