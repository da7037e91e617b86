"""The mirror sink: ``_crossfeed.<feed>.changes`` -> target topics, exactly once.

Consume-transform-produce with Kafka transactions: sink instances share the staging
partitions through the consumer group ``crossfeed-sink.<feed>`` (cooperative-sticky);
each transaction holds the copies, the dead letters, the OffsetSync ranges of those
copies and the group's input positions (``send_offsets_to_transaction`` with the
group's metadata, so an instance whose generation is stale is fenced).

OffsetSync ranges come from delivery reports: per source partition one record per
contiguous run, broken at a gap on either side — skipped source offsets (compaction,
aborted transactions, filtered or loop-dropped records) or a target jump (the
transaction marker each commit leaves in the target partition, or another writer).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.config import Settings
from crossfeed.core.offset_ranges import OffsetSyncWriter
from crossfeed.core.partitions import TopicPartition
from crossfeed.dlq import DeadLetter, FeedStopped
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.membership import HeartbeatContent, HeartbeatSender, ensure_control_topics
from crossfeed.wire import codec, headers, topics
from services.puller.worker import (
    DLQ_MAX_MESSAGE_BYTES,
    STAGING_MAX_MESSAGE_BYTES,
    wait_for_cluster,
)
from services.sink import metrics
from services.sink.targets import TargetTopics, record_size

log = logging.getLogger(__name__)

RESOLVED = headers.TYPE_RESOLVED.encode()
FENCED = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)


class RetryLater(RuntimeError):
    """The transaction cannot complete now (target not ready); abort, rewind, retry."""


class MirrorSink:
    def __init__(
        self, settings: Settings, feed: FeedSpec, instance_id: str, control_conf: dict[str, Any]
    ) -> None:
        self.settings = settings
        self.control_conf = control_conf
        self.heartbeats: HeartbeatSender | None = None
        self.address = ""
        self.checkpoints: dict[str, int] = {}  # "topic/partition" -> checkpoint_ts (µs)
        self.feed = feed
        self.instance_id = instance_id
        target_alias = feed.sink.cluster
        assert target_alias is not None
        self.target_alias = target_alias
        self.target_conf = settings.cluster(target_alias).client_config()
        self.changes_topic = topics.changes(feed.name)
        self.consumer: Any = None
        self.producer: Any = None
        self.targets: TargetTopics | None = None
        self.writers: dict[TopicPartition, OffsetSyncWriter] = {}
        self.labels: dict[TopicPartition, tuple[str, str, str]] = {}
        self.source_clusters: dict[TopicPartition, str] = {}  # cluster.id per source partition
        self.state = "starting"
        self.last_error: str | None = None
        self._reset_txn()

    def _reset_txn(self) -> None:
        self.in_txn = False
        self.txn_started = 0.0
        self.txn_records = 0
        self.first_offset: dict[int, int] = {}  # staging partition -> first offset in txn
        self.next_input: dict[int, int] = {}  # staging partition -> next offset after txn
        self.delivered: dict[TopicPartition, list[tuple[int, int, int]]] = defaultdict(list)
        self.marks: dict[TopicPartition, dict[str, Any]] = {}
        self.newest_ts_ms: dict[TopicPartition, int] = {}
        self.delivery_error: KafkaError | None = None

    # -- lifecycle ------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        wait_for_cluster(self.target_alias, self.target_conf, stop)
        admin = clients.admin(self.target_conf)
        kafka_topics.ensure_topic(
            admin,
            topics.OFFSET_SYNCS,
            1,
            {
                "cleanup.policy": "compact,delete",
                "retention.ms": str(7 * 86_400_000),
                "segment.ms": str(3_600_000),
            },
        )
        kafka_topics.ensure_topic(
            admin,
            topics.DLQ,
            1,
            {"cleanup.policy": "delete", "max.message.bytes": str(DLQ_MAX_MESSAGE_BYTES)},
        )
        kafka_topics.ensure_topic(
            admin,
            self.changes_topic,
            self.feed.config.staging_partitions,
            {"cleanup.policy": "delete", "max.message.bytes": str(STAGING_MAX_MESSAGE_BYTES)},
        )
        self.targets = TargetTopics(admin)
        self.producer = self._new_producer()
        self.consumer = clients.consumer(
            self.target_conf,
            **{
                "group.id": f"crossfeed-sink.{self.feed.name}",
                "client.id": self.instance_id,
                "partition.assignment.strategy": "cooperative-sticky",
                "session.timeout.ms": int(self.settings.coordinator.failover_timeout_s * 1000),
                "heartbeat.interval.ms": 1000,
                "queued.max.messages.kbytes": 65536,
                "fetch.wait.max.ms": 50,
            },
        )
        self.consumer.subscribe(
            [self.changes_topic], on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        ensure_control_topics(self.control_conf)
        self.heartbeats = HeartbeatSender(
            self.control_conf, self.instance_id, "sink", self._heartbeat
        ).start()
        self.state = "normal"
        log.info(
            "sink %s started for feed %s (-> %s)",
            self.instance_id,
            self.feed.name,
            self.target_alias,
        )

    def run(self, stop: threading.Event) -> None:
        self.start(stop)
        try:
            while not stop.is_set():
                self.step()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        if self.in_txn:
            try:
                self._commit()
            except (KafkaException, RetryLater) as err:
                log.warning("final commit failed (%s); aborting", err)
                self._abort()
        if self.consumer is not None:
            self.consumer.close()  # leaves the group: the others take over at once
            self.consumer = None
        if self.producer is not None:
            self.producer.flush(5)
        if self.heartbeats is not None:
            self.heartbeats.leave()
        log.info("sink %s stopped", self.instance_id)

    # -- the loop -------------------------------------------------------------------

    def step(self) -> None:
        opts = self.settings.sink
        try:
            for msg in self.consumer.consume(opts.max_batch_records, timeout=0.05):
                if msg.error():
                    if not msg.error().retriable():
                        log.warning("staging read error: %s", msg.error())
                    continue
                self._handle(msg)
            if self.in_txn and (
                self.txn_records >= opts.max_batch_records
                or time.monotonic() - self.txn_started >= opts.commit_interval_ms / 1000
            ):
                self._commit()
        except RetryLater as err:
            self._enter_error(str(err))
            self._abort()
            time.sleep(1.0)
        except KafkaException as err:
            self._on_kafka_error(err)

    def _handle(self, msg: Any) -> None:
        if not self.in_txn:
            self.producer.begin_transaction()
            self.in_txn = True
            self.txn_started = time.monotonic()
        p = msg.partition()
        self.first_offset.setdefault(p, msg.offset())
        self.next_input[p] = msg.offset() + 1
        msg_headers = msg.headers()
        if msg_headers and any(k == headers.TYPE and v == RESOLVED for k, v in msg_headers):
            mark = codec.decode("ResolvedMark", msg.value())
            self.marks[TopicPartition(mark["topic"], mark["partition"])] = mark
            return
        try:
            event = codec.decode("ChangeEvent", msg.value())
        except codec.CodecError as err:
            self._dead_letter_raw(msg, str(err))
            return
        src = TopicPartition(event["topic"], event["partition"])
        self.source_clusters[src] = event["source_cluster"]
        labels = self._labels(src)
        target_name = self.feed.target_topic(src.topic)
        assert self.targets is not None
        target = self.targets.get(target_name)
        if target is None:
            raise RetryLater(
                f"target topic {target_name!r} does not exist yet on {self.target_alias}"
            )
        if src.partition >= target.partitions:
            raise RetryLater(
                f"target topic {target_name!r} has {target.partitions} partition(s) but source "
                f"partition {src} needs at least {src.partition + 1}; add partitions on "
                f"{self.target_alias}"
            )
        hdrs = event["headers"]
        size = record_size(event["key"], event["value"], hdrs)
        if size > target.max_message_bytes:
            self._dead_letter(
                event,
                "RecordTooLarge",
                f"record of {size} bytes exceeds max.message.bytes={target.max_message_bytes} "
                f"of target topic {target_name}",
                labels,
            )
            return
        offset = event["offset"]
        delivered = self.delivered[src]

        def on_delivery(err: KafkaError | None, out: Any) -> None:
            if err is not None:
                self.delivery_error = err
            else:
                delivered.append((offset, out.partition(), out.offset()))

        ts = event["timestamp_ms"]
        self._produce(
            target_name,
            event["value"],
            event["key"],
            src.partition,
            [(h["key"], h["value"]) for h in hdrs],
            ts if ts >= 0 else 0,
            on_delivery,
        )
        self.txn_records += 1
        self.newest_ts_ms[src] = ts
        metrics.RECORDS.labels(*labels).inc()
        metrics.BYTES.labels(*labels).inc(
            (len(event["key"]) if event["key"] else 0)
            + (len(event["value"]) if event["value"] else 0)
        )

    def _produce(
        self, topic: str, value: Any, key: Any, partition: int, hdrs: Any, ts: int, cb: Any
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    headers=hdrs,
                    timestamp=ts,
                    on_delivery=cb,
                )
                return
            except BufferError:
                self.producer.poll(0.05)

    # -- dead letters ---------------------------------------------------------------

    def _dead_letter(
        self, event: dict[str, Any], error_class: str, reason: str, labels: tuple[str, str, str]
    ) -> None:
        letter = DeadLetter(
            feed=self.feed.name,
            cluster_id=event["source_cluster"],
            topic=event["topic"],
            partition=event["partition"],
            offset=event["offset"],
            stage="sink",
            error_class=error_class,
            error_message=reason,
        )
        if self.feed.config.errors_tolerance == "none":
            raise FeedStopped(letter)
        log.warning("dead letter: %s", letter.describe())
        original = [(h["key"], h["value"]) for h in event["headers"]]
        self._produce(
            topics.DLQ, event["value"], event["key"], 0, letter.headers(original), 0, None
        )
        metrics.DLQ.labels(*labels).inc()

    def _dead_letter_raw(self, msg: Any, reason: str) -> None:
        letter = DeadLetter(
            feed=self.feed.name,
            cluster_id=self.target_alias,
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            stage="sink",
            error_class="UndecodableChangeEvent",
            error_message=reason,
        )
        if self.feed.config.errors_tolerance == "none":
            raise FeedStopped(letter)
        log.warning("dead letter: %s", letter.describe())
        self._produce(
            topics.DLQ,
            msg.value(),
            msg.key(),
            0,
            letter.headers(list(msg.headers() or [])),
            0,
            None,
        )

    # -- transactions ---------------------------------------------------------------

    def _commit(self) -> None:
        """Copies, OffsetSyncs and input positions in one transaction."""
        self.producer.flush(60)  # every delivery report is in before syncs are written
        if self.delivery_error is not None:
            raise KafkaException(self.delivery_error)
        syncs = 0
        for src, pairs in self.delivered.items():
            writer = self.writers.setdefault(src, OffsetSyncWriter())
            target_topic = self.feed.target_topic(src.topic)
            for source_offset, _target_partition, target_offset in sorted(pairs):
                writer.add(source_offset, target_offset)
            for run in writer.flush():
                sync = {
                    "source_cluster": self.source_clusters[src],
                    "topic": src.topic,
                    "partition": src.partition,
                    "source_start": run.source_start,
                    "source_end": run.source_end,
                    "target_topic": target_topic,
                    "target_partition": src.partition,
                    "target_start": run.target_start,
                    "feed": self.feed.name,
                }
                self._produce(
                    topics.OFFSET_SYNCS,
                    codec.encode("OffsetSync", sync),
                    f"{self.feed.name}/{src}".encode(),
                    0,
                    None,
                    0,
                    None,
                )
                syncs += 1
        offsets = [KafkaTP(self.changes_topic, p, o) for p, o in self.next_input.items()]
        self.producer.send_offsets_to_transaction(
            offsets, self.consumer.consumer_group_metadata(), 30
        )
        self.producer.commit_transaction(60)
        metrics.TRANSACTIONS.labels(self.feed.name).inc()
        metrics.OFFSET_SYNCS.labels(self.feed.name).inc(syncs)
        now_ms = time.time() * 1000
        for src, ts in self.newest_ts_ms.items():
            metrics.LAG_SECONDS.labels(*self._labels(src)).set(max(0.0, (now_ms - ts) / 1000))
        for src, mark in self.marks.items():
            # Everything of src up to this mark is now committed in the target.
            self.checkpoints[str(src)] = mark["resolved_ts_us"]
            metrics.CHECKPOINT_TS.labels(*self._labels(src)).set(mark["resolved_ts_us"] / 1e6)
        if self.state == "error":
            log.info("feed %s: sink writing again", self.feed.name)
            self.state, self.last_error = "normal", None
        self._reset_txn()

    def _abort(self) -> None:
        """Abort the open transaction and rewind the input to where it began."""
        if not self.in_txn:
            return
        try:
            self.producer.abort_transaction(30)
        except KafkaException as err:
            log.warning("abort failed: %s", err)
        for writer in self.writers.values():
            writer.abort()
        assigned = {tp.partition for tp in self.consumer.assignment()}
        for p, offset in self.first_offset.items():
            if p in assigned:
                self.consumer.seek(KafkaTP(self.changes_topic, p, offset))
        metrics.ABORTS.labels(self.feed.name).inc()
        self._reset_txn()

    def _on_kafka_error(self, exc: KafkaException) -> None:
        err: KafkaError = exc.args[0]
        if err.code() in FENCED or err.fatal():
            # A newer generation owns our partitions (we were paused or cut off): drop
            # everything in flight and start over with a fresh producer.
            log.warning("sink %s fenced (%s): restarting its producer", self.instance_id, err.str())
            self._reset_txn()
            self.writers.clear()
            self.producer = self._new_producer()
            for tp in self.consumer.assignment():
                committed = self.consumer.committed([tp], timeout=10)[0]
                if committed.offset >= 0:
                    self.consumer.seek(committed)
            return
        log.warning("transaction failed (%s); aborting and retrying", err.str())
        self._abort()

    def _on_revoke(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        # Partitions leave us: what we read from them must be committed (or undone) first.
        if self.in_txn:
            try:
                self._commit()
            except (KafkaException, RetryLater) as err:
                log.warning("commit before revocation failed (%s); aborting", err)
                self._abort()

    def _on_lost(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        self._abort()

    # -- helpers --------------------------------------------------------------------

    def _new_producer(self) -> Any:
        """The instance's transactional producer (KIP-447: fenced by group generation)."""
        producer = clients.producer(
            self.target_conf,
            **{
                "transactional.id": f"crossfeed-sink.{self.feed.name}.{self.instance_id}",
                "transaction.timeout.ms": 60000,
                "linger.ms": 10,
                "batch.size": 1 << 20,
                "message.max.bytes": STAGING_MAX_MESSAGE_BYTES + 1024,
                "queue.buffering.max.kbytes": 262144,
            },
        )
        producer.init_transactions(60)
        return producer

    def _enter_error(self, message: str) -> None:
        if self.last_error != message:
            log.error("feed %s: %s", self.feed.name, message)
        self.state, self.last_error = "error", message

    def _labels(self, src: TopicPartition) -> tuple[str, str, str]:
        labels = self.labels.get(src)
        if labels is None:
            labels = self.labels[src] = (self.feed.name, src.topic, str(src.partition))
        return labels

    def _heartbeat(self) -> HeartbeatContent:
        assigned = self.consumer.assignment() if self.consumer else []
        return HeartbeatContent(
            tasks=[f"{self.feed.name}/sink/{tp.partition}" for tp in assigned],
            feeds=[self.feed.name],
            address=self.address,
            checkpoints=dict(self.checkpoints),
            last_error=self.last_error or "",
        )

    def status(self) -> dict[str, Any]:
        return {
            "role": "sink",
            "instance": self.instance_id,
            "feed": self.feed.name,
            "state": self.state,
            "last_error": self.last_error,
            "tasks": sorted(
                tp.partition for tp in (self.consumer.assignment() if self.consumer else [])
            ),
        }
