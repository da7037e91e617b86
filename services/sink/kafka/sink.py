"""The ordered-feed sink into Kafka: ``_crossfeed.<feed>.sorted`` -> one target topic.

docs/ordered-feeds.md §4. Consume-transform-produce: the sink instances of a feed share
the one sorted partition through the consumer group ``crossfeed-sink.<feed>`` (one of
them owns it); the owner streams each source transaction's data records into the target
topic (partition 0; created with one partition when missing) inside a Kafka transaction,
and commits that transaction only between source transactions, so a read_committed
reader of the target sees a source transaction whole or not at all. Several whole source
transactions may share one Kafka transaction (``sink.commit_interval_ms``,
``sink.max_batch_records``); a big one is streamed, never held in memory.

The applied position (commit_ts, txn id of the last whole transaction) and checkpoint_ts
travel as the metadata of the group offset committed with ``send_offsets_to_transaction``,
so data and position are one atomic write; at start the owner reads them back, and the
:class:`~crossfeed.services.sink.sorted_stream.Sequencer` drops every replayed transaction at or
below the position.

A transaction cut short (docs §3) whose records were already produced: the Kafka
transaction is aborted — taking the whole source transactions before it with it — the
input rewinds to the committed offset, and the re-read drops the cut-short one (its
``begin`` offset is remembered), so the whole ones are written again and committed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.cdc.schema_copy import SchemaFollower
from crossfeed.dlq import FeedStopped
from crossfeed.kafka import clients
from crossfeed.kafka.protocols import GroupConsumer, Message, TransactionalProducer
from crossfeed.kafka.targets import record_size
from crossfeed.membership import HeartbeatContent
from crossfeed.services.sink import metrics
from crossfeed.services.sink.base import SORTED_PARTITION, OrderedSink, relax_cycle_collector
from crossfeed.services.sink.kafka import position
from crossfeed.services.sink.kafka.target import (
    check_target,
    ready_target,
    target_producer,
    warn_if_expired,
)
from crossfeed.services.sink.schemas import UnknownSchema
from crossfeed.wire import confluent_avro
from crossfeed.wire.headers import ORDER, SCHEMA, TIMESTAMP

log = logging.getLogger(__name__)


class KafkaSink(OrderedSink):
    def _init_target(self) -> None:
        sink = self.feed.sink
        assert sink.cluster is not None and sink.topic is not None
        self.target_alias = sink.cluster
        self.target_topic = sink.topic
        self.target_conf = self.settings.cluster(sink.cluster).client_config()
        # Typed by what the transaction code asks of them (crossfeed/kafka/protocols.py),
        # so it runs against fakes in unit tests; start() makes the real ones.
        self.consumer: GroupConsumer | None = None
        self.producer: TransactionalProducer | None = None
        self.max_message_bytes = 0
        self.retention_ms: int | None = None  # the target's time retention, if it has one
        self.expired_warned_at = 0.0
        self.owner = False  # this instance holds the sorted partition
        opts = self.feed.config
        # records in Confluent's wire format: their schemas follow into the target side's
        # registry before the transaction that writes them commits (crossfeed/cdc/schema_copy.py)
        self.follower = (
            SchemaFollower(opts.schema_registry_url, opts.schema_registry_target_url)
            if opts.schema_registry_url and opts.schema_registry_target_url
            else None
        )

    def _reset_txn(self) -> None:
        super()._reset_txn()
        self.open_produced = 0  # records of the open source transaction produced
        self.schema_ids: set[int] = set()  # registry ids the open transaction's records name

    # -- lifecycle ------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        relax_cycle_collector()
        admin = self._prepare_cluster(self.target_alias, self.target_conf, stop)
        target = ready_target(admin, self.target_topic, self.feed.name, stop)
        self.max_message_bytes, self.retention_ms = target
        self.producer = self._new_producer()
        conf = {
            **self._consumer_conf(),
            "session.timeout.ms": int(self.settings.coordinator.failover_timeout_s * 1000),
            "heartbeat.interval.ms": 1000,
        }
        if self.static:
            conf["group.instance.id"] = self.instance_id
        consumer = self.consumer = clients.consumer(self.target_conf, **conf)
        consumer.subscribe(
            [self.sorted_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        self._start_heartbeats()
        self.state = "normal"
        log.info(
            "ordered sink %s started for feed %s (%s -> %s/%s)",
            self.instance_id,
            self.feed.name,
            self.sorted_topic,
            self.target_alias,
            self.target_topic,
        )

    def _finish(self, why: str) -> None:
        """Commit what is read when that ends on a source transaction, else abort (a
        source transaction is never split)."""
        if not self.in_txn:
            return
        if self.sequencer.open is not None:
            self._abort()
            return
        try:
            self._commit()
        except KafkaException as err:
            log.warning("commit %s failed (%s); aborting", why, err)
            self._abort()

    def shutdown(self) -> None:
        self._finish("at shutdown")
        self._close(self.consumer, self.producer)

    # -- the loop -------------------------------------------------------------------

    def step(self, stop: threading.Event) -> None:
        try:
            self._read_and_commit(self.consumer)
        except FeedStopped:
            self._abort()
            raise
        except KafkaException as err:
            self._on_kafka_error(err)

    def _opened(self) -> None:
        self.open_produced = 0

    def _completed(self) -> None:
        self.open_produced = 0

    def _cut_short(self) -> bool:
        cut = self.sequencer.cut
        assert cut is not None
        if not self.open_produced:
            return True
        # Its records are in the Kafka transaction: abort, rewind, re-read the whole
        # ones before it, and drop it next time.
        self._abort(cut_at=cut.begin_offset)
        return False

    def _apply(self, msg: Message, hdrs: list[Any] | None) -> None:
        key = msg.key()
        try:
            value = self._value(msg, hdrs)
        except UnknownSchema as err:
            self._dead_letter_here(msg, "UnknownSchema", str(err))
            return
        if record_size(key, value, hdrs) > self.max_message_bytes:
            self._dead_letter_here(
                msg,
                "RecordTooLarge",
                f"record exceeds max.message.bytes={self.max_message_bytes} of target topic "
                f"{self.target_topic}",
            )
            return
        ts_ms, hdrs = source_timestamp(msg.timestamp()[1], hdrs)
        producer = self.producer
        assert producer is not None  # records are only read once start() made it
        clients.produce_copy(producer, self.target_topic, value, key, 0, None, max(ts_ms, 0), hdrs)
        if self.follower is not None:
            for raw in (value, key):
                if (sid := confluent_avro.schema_id(raw)) is not None:
                    self.schema_ids.add(sid)
        self.open_produced += 1
        self.txn_events += 1
        self.txn_bytes += (len(key) if key else 0) + (len(value) if value else 0)
        self.newest_ts_ms = ts_ms

    # -- dead letters ---------------------------------------------------------------

    def _dead_letter_here(self, msg: Message, error_class: str, reason: str) -> None:
        """Into the open Kafka transaction (with the records it stands among)."""
        self._dead_letter(msg, error_class, reason, self.producer, self.target_alias)

    # -- transactions ---------------------------------------------------------------

    def _clients(self) -> tuple[TransactionalProducer, GroupConsumer]:
        """The producer and consumer start() made (transactions need both)."""
        if self.producer is None or self.consumer is None:
            raise RuntimeError(f"sink {self.instance_id} is not started")
        return self.producer, self.consumer

    def _begin(self) -> None:
        self._clients()[0].begin_transaction()
        self._open_txn()

    def _commit(self) -> None:
        """Everything read so far, with the position, in one Kafka transaction."""
        assert self.sequencer.open is None
        if self.follower is not None and self.schema_ids:
            problem = self.follower.ensure(self.schema_ids)
            if problem is not None:  # never a record on the target without its schema
                log.warning("feed %s: %s; reading the transaction again", self.feed.name, problem)
                self.state, self.last_error = "error", problem
                self._abort()
                time.sleep(1.0)
                return
        producer, consumer = self._clients()
        applied = self._next_applied()
        if self.next_offset >= 0:
            offsets = [
                KafkaTP(
                    self.sorted_topic, SORTED_PARTITION, self.next_offset, metadata=applied.encode()
                )
            ]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        started = time.monotonic()
        producer.commit_transaction(60)
        metrics.TRANSACTION_COMMIT_SECONDS.labels(self.feed.name).observe(
            time.monotonic() - started
        )
        self.committed = applied
        if self.next_offset >= 0:
            self.committed_offset = self.next_offset
            self.sequencer.forget_cut_below(self.next_offset)
        self._count_commit()
        self._warn_if_expired()
        self._reset_txn()

    def _warn_if_expired(self) -> None:
        """Records older than the target's retention.ms: said once a minute at most."""
        self.expired_warned_at = warn_if_expired(
            (self.feed.name, self.target_topic),
            self.retention_ms,
            self.newest_ts_ms,
            self.expired_warned_at,
        )

    def _abort(self, cut_at: int | None = None) -> None:
        """Abort the open Kafka transaction and rewind the input to the committed offset;
        ``cut_at``: the begin offset of a cut-short transaction to drop on the re-read."""
        if self.in_txn:
            try:
                # Deliveries first: aborting while produce requests were still queued
                # after an earlier commit failed now and then with a fatal
                # INVALID_TXN_STATE (Kafka 4.3 broker, librdkafka 2.16; 1 in ~100
                # commit/abort cycles here, none in 900 with the flush).
                producer = self._clients()[0]
                producer.flush(30)
                producer.abort_transaction(30)
            except KafkaException as err:
                log.warning("abort failed: %s", err)
            metrics.ABORTS.labels(*self.labels).inc()
        known = self.sequencer.known_cut | ({cut_at} if cut_at is not None else set())
        self._restart_sequencer(tuple(known))
        if self.owner:
            self._seek_committed()
        self._reset_txn()

    def _seek_committed(self) -> None:
        position.seek(self._clients()[1], self.sorted_topic, self.committed_offset)

    def _on_kafka_error(self, exc: KafkaException) -> None:
        err: KafkaError = exc.args[0]
        if clients.is_fenced(err):
            log.warning("sink %s fenced (%s): restarting its producer", self.instance_id, err.str())
            self.producer = self._new_producer()
            self.in_txn = False
            self._reload_position()
            self._abort()
            return
        log.warning("transaction failed (%s); aborting and retrying", err.str())
        self._abort()

    def _reload_position(self) -> None:
        """The committed offset and position, as the group coordinator has them."""
        consumer = self._clients()[1]
        self.committed, self.committed_offset = position.group_position(
            consumer, self.sorted_topic, self.feed.name
        )
        self._restart_sequencer()

    def _on_assign(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        if not any(tp.partition == SORTED_PARTITION for tp in partitions):
            return
        self._reload_position()
        rewind = self._check_target()
        if rewind is not None:  # read the lost transactions again (eager assignment)
            for tp in partitions:
                if tp.partition == SORTED_PARTITION:
                    tp.offset = rewind
            consumer.assign(partitions)
        self.owner = True
        log.info(
            "feed %s: sink %s owns %s from offset %d, applied %s, checkpoint_ts %d",
            self.feed.name,
            self.instance_id,
            self.sorted_topic,
            self.committed_offset,
            self.committed.position.describe(),
            self.committed.checkpoint_ts,
        )

    def _check_target(self) -> int | None:
        """The applied position checked against the end of the target topic (target.py):
        corrected where the target's records say more. Returns the sorted-stream offset to
        read from again when transactions the position covers are not in the target."""
        found = check_target(
            self.target_conf,
            (self.target_topic, self.sorted_topic),
            self.feed.name,
            (self.committed.position, self.committed_offset),
        )
        if found is None:
            return None
        resumed, rewind = found
        self.committed = dataclasses.replace(self.committed, position=resumed)
        if rewind is not None:
            self.committed_offset = rewind
        self._restart_sequencer()
        return rewind

    def _on_revoke(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        self._finish("before revocation")
        self.owner = False

    def _on_lost(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        self.owner = False
        self._abort()

    # -- helpers --------------------------------------------------------------------

    def _new_producer(self) -> TransactionalProducer:
        return target_producer(self.target_conf, self.feed.name, self.instance_id)

    def _heartbeat(self) -> HeartbeatContent:
        return self._heartbeat_content(self.owner)

    def status(self) -> dict[str, Any]:
        return self._status(self.owner, f"kafka://{self.target_alias}/{self.target_topic}")


def source_timestamp(sorted_ts_ms: int, hdrs: list[Any] | None) -> tuple[int, list[Any] | None]:
    """The source record's timestamp and the headers to write: Spark's Kafka writer cannot
    set a record timestamp, so the sorter carries it in ``crossfeed-timestamp``
    (docs/ordered-feeds.md §3); the target gets it back and not the header. Nor does it get
    ``crossfeed-schema`` (the value it names the schema of is whole again) or
    ``crossfeed-order`` (the record's place in `.sorted`)."""
    if not hdrs:
        return sorted_ts_ms, hdrs
    ts_ms = sorted_ts_ms
    kept = []
    for name, value in hdrs:
        if name == TIMESTAMP:
            with contextlib.suppress(TypeError, ValueError):
                ts_ms = int(value)
        elif name != SCHEMA and name != ORDER:
            kept.append((name, value))
    return ts_ms, kept
