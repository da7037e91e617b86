"""The mirror sink: ``_crossfeed.<feed>.changes`` -> target topics, exactly once.

Consume-transform-produce with Kafka transactions: sink instances share the staging
partitions through the consumer group ``crossfeed-sink.<feed>`` (cooperative-sticky);
each transaction holds the copies, the dead letters, the OffsetSync ranges of those
copies and the group's input positions (``send_offsets_to_transaction`` with the
group's metadata, so an instance whose generation is stale is fenced).

A staged record is a ``CopiedRecords`` pack (crossfeed/wire/copied.py): records of one
source partition, in offset order, packed column-wise. The pack names the source cluster,
topic and partition — where its copies go (the target topic named by rename-format, the
same partition number) — and every record's offset, for ``crossfeed-src`` and the
OffsetSync ranges. Each record becomes one target record: key, value and timestamp as on
the source, its headers, the provenance headers, ``crossfeed-src`` last.

OffsetSync ranges come from delivery reports: per source partition one record per
contiguous run, broken at a gap on either side — skipped source offsets (compaction,
aborted transactions, filtered or loop-dropped records) or a target jump (the
transaction marker each commit leaves in the target partition, or another writer).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.config import Settings
from crossfeed.core.offset_ranges import OffsetSyncWriter
from crossfeed.core.partitions import TopicPartition
from crossfeed.core.timestamps import commit_interval_ms
from crossfeed.dlq import DeadLetter, FeedStopped
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.kafka.reachability import Reachability, wait_for_cluster
from crossfeed.membership import HeartbeatContent, HeartbeatSender, ensure_control_topics
from crossfeed.wire import codec, copied, headers, ids, topics
from crossfeed.wire.codec import CodecError
from services.sink import metrics
from services.sink.targets import TargetTopics, record_size

log = logging.getLogger(__name__)

RESOLVED = headers.TYPE_RESOLVED.encode()
SIZE_SLACK = 64 << 10  # below max.message.bytes by this much, no exact size check is needed
CONSUME_BATCH = 32  # staging records (packs of up to puller.pack_bytes) per consume call
READ_WAIT_S = 0.05  # longest a consume call waits for staging records


class RetryLater(RuntimeError):
    """The transaction cannot complete now (target not ready); abort, rewind, retry."""


@dataclass
class SourceRoute:
    """One source partition as the sink sees it: where its copies go, what they cost."""

    source: TopicPartition
    cluster_id: str
    target_topic: str
    max_message_bytes: int
    labels: tuple[str, str, str]
    records: int = 0  # written in the open transaction
    bytes: int = 0
    dead_letters: int = 0
    newest_ts_ms: int = -1
    blocks: list[Block] = field(default_factory=list)  # written in the open transaction
    exact: bool = False  # a delivery report per record (another writer interleaves)

    def reset(self) -> None:
        self.records = self.bytes = self.dead_letters = 0
        self.blocks = []


class Block:
    """Copies written in order to one target partition, whose target offsets are known
    from two delivery reports: the first's and the last's. The idempotent producer
    appends them in order, so when ``last - first == count - 1`` nothing came between
    them and every copy's target offset follows (OffsetSyncWriter.add_block); otherwise
    another writer interleaved, and the transaction is redone with a block per record.
    Per-record reports cost a Python callback per record; two per pack do not."""

    __slots__ = ("error", "first_target", "last_target", "source_offsets")

    def __init__(self, source_offsets: Any) -> None:
        self.source_offsets = source_offsets
        self.first_target = -1
        self.last_target = -1
        self.error: KafkaError | None = None

    def first(self, err: KafkaError | None, out: Any) -> None:
        if err is not None:
            self.error = err
        else:
            self.first_target = out.offset()

    def last(self, err: KafkaError | None, out: Any) -> None:
        if err is not None:
            self.error = err
        else:
            self.last_target = out.offset()

    def only(self, err: KafkaError | None, out: Any) -> None:
        self.first(err, out)
        self.last(err, out)

    def target_start(self) -> int:
        """The first copy's target offset; TargetInterleaved if the copies are not
        contiguous in the target partition, KafkaException if a report failed."""
        if self.error is not None:
            raise KafkaException(self.error)
        if self.first_target < 0 or self.last_target < 0:
            raise KafkaException(KafkaError(KafkaError._FAIL, "delivery reports missing"))
        if self.last_target - self.first_target != len(self.source_offsets) - 1:
            raise TargetInterleaved(
                f"{len(self.source_offsets)} copies landed at target offsets "
                f"{self.first_target}..{self.last_target}: another writer interleaved"
            )
        return self.first_target


class _FatalRead:
    """A fatal error raised by ``consume`` itself, as if it came with the batch."""

    def __init__(self, err: KafkaError) -> None:
        self._err = err

    def error(self) -> KafkaError:
        return self._err


class TargetInterleaved(RuntimeError):
    """Another producer wrote between the copies of a block: redo with exact reports."""


class MirrorSink:
    def __init__(
        self,
        settings: Settings,
        feed: FeedSpec,
        instance_id: str,
        control_conf: dict[str, Any],
        static: bool = False,
    ) -> None:
        self.settings = settings
        self.static = static
        self.feed = feed
        self.instance_id = instance_id
        self.control_conf = control_conf
        target_alias = feed.sink.cluster
        assert target_alias is not None
        self.target_alias = target_alias
        self.target_conf = settings.cluster(target_alias).client_config()
        self.changes_topic = topics.changes(feed.name)
        self.consumer: Any = None
        self.producer: Any = None
        self.heartbeats: HeartbeatSender | None = None
        self.targets: TargetTopics | None = None
        self.address = ""
        self.routes: dict[tuple[str, str, int], SourceRoute] = {}  # by source cluster.id/tp
        self.writers: dict[TopicPartition, OffsetSyncWriter] = {}
        self.checkpoints: dict[str, int] = {}  # "topic/partition" -> checkpoint_ts (µs)
        self.state = "starting"
        self.newest_ts_ms = -1  # timestamp of the newest source record written
        # Staging partitions assigned, kept by the rebalance callbacks (the main thread) for
        # the heartbeat and /status threads: confluent-kafka serializes calls on a consumer,
        # and a thread asking consumer.assignment() could wait for ever behind the main
        # thread's back-to-back consume() calls (seen: /status unanswered for a minute).
        self.assigned: frozenset[int] = frozenset()
        self.last_error: str | None = None
        self.rewind = False  # to the committed positions, once a new producer runs
        self.reachability = Reachability("target", target_alias, self.target_conf)
        self.interval_s = settings.sink.commit_interval_ms / 1000  # of the open transaction
        self._reset_txn()

    def _reset_txn(self) -> None:
        self.in_txn = False
        self.txn_started = 0.0
        self.txn_records = 0
        self.first_offset: dict[int, int] = {}  # staging partition -> first offset in txn
        self.next_input: dict[int, int] = {}  # staging partition -> next offset after txn
        self.marks: dict[TopicPartition, dict[str, Any]] = {}
        for route in self.routes.values():
            route.reset()

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
            topics.dlq_config(),
        )
        kafka_topics.ensure_topic(
            admin,
            self.changes_topic,
            self.feed.config.staging_partitions,
            topics.staging_config(),
        )
        self.targets = TargetTopics(admin)
        self.producer = self._new_producer()
        self.consumer = self._new_consumer()
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
            except (KafkaException, RetryLater, TargetInterleaved) as err:
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
        if self.producer is None and not self._restart_producer():
            return
        try:
            try:
                batch = self.consumer.consume(CONSUME_BATCH, timeout=self._read_wait())
                self.reachability.polled()
            except KafkaException as err:
                if not clients.is_fatal(err.args[0]):
                    raise
                batch = [_FatalRead(err.args[0])]
            fatal = next(
                (m.error() for m in batch if m.error() and clients.is_fatal(m.error())), None
            )
            if fatal is not None:
                self._replace_consumer(fatal)
                return
            for i, msg in enumerate(batch):
                try:
                    if msg.error():
                        if not msg.error().retriable():
                            log.warning("staging read error: %s", msg.error())
                        continue
                    self._handle(msg)
                    if self._due():  # between packs too: a batch can take 100 ms to write
                        self._commit()
                except BaseException:
                    self._unread(batch[i:])
                    raise
            # Catching up a backlog: fewer, larger transactions (see commit_interval_ms);
            # keeping up: commit often, for low end-to-end lag.
            interval_ms = commit_interval_ms(
                len(batch) >= CONSUME_BATCH,
                self.newest_ts_ms,
                time.time() * 1000,
                opts.commit_interval_ms,
                opts.backlog_commit_interval_ms,
            )
            self.interval_s = interval_ms / 1000
            if self._due():
                self._commit()
        except TargetInterleaved as err:
            log.info("feed %s: %s; redoing the transaction with exact reports", self.feed.name, err)
            self._abort()
        except RetryLater as err:
            self._enter_error(str(err))
            self._abort()
            time.sleep(1.0)
        except KafkaException as err:
            self._on_kafka_error(err)

    def _due(self) -> bool:
        """Is the open transaction full or old enough to commit?"""
        return self.in_txn and (
            self.txn_records >= self.settings.sink.max_batch_records or self._due_in() <= 0
        )

    def _due_in(self) -> float:
        """Seconds until the open transaction is old enough to commit."""
        return self.txn_started + self.interval_s - time.monotonic()

    def _unread(self, rest: list[Any]) -> None:
        """Rewind to the first of ``rest``, read but not handled when handling failed: the
        consumer's position is past them, and a partition without records in the open
        transaction is not rewound by _abort (which runs after this and wins where both
        rewind: its offsets are the earlier ones)."""
        first: dict[int, int] = {}
        for msg in rest:
            if not msg.error():
                first.setdefault(msg.partition(), msg.offset())
        assigned = self._assignment_now()
        for p, offset in first.items():
            if p in assigned:  # a revoked one is read again from its committed offset
                self.consumer.seek(KafkaTP(self.changes_topic, p, offset))

    def _assignment_now(self) -> set[int]:
        """The staging partitions assigned, asked of the consumer: main thread only (the
        other threads read ``self.assigned``)."""
        return {tp.partition for tp in self.consumer.assignment()}

    def _read_wait(self) -> float:
        """How long the next read may wait: librdkafka's consume waits out its whole
        timeout unless the batch fills, and a commit due meanwhile would be that late —
        with packs arriving a few at a time, every transaction was up to 50 ms late."""
        if not self.in_txn:
            return READ_WAIT_S
        return min(READ_WAIT_S, max(0.0, self._due_in()))

    def _handle(self, msg: Any) -> None:
        if self.producer is None:  # dropped by a failed abort in a rebalance callback
            raise KafkaException(KafkaError(KafkaError._STATE, "no producer until the next step"))
        if not self.in_txn:
            self.producer.begin_transaction()
            self.in_txn = True
            self.txn_started = time.monotonic()
        p = msg.partition()
        self.first_offset.setdefault(p, msg.offset())
        self.next_input[p] = msg.offset() + 1
        hdrs = msg.headers()
        if hdrs:  # packs carry no headers: a resolved mark, or not ours
            if hdrs[-1] == (headers.TYPE, RESOLVED):
                mark = codec.decode("ResolvedMark", msg.value())
                self.marks[TopicPartition(mark["topic"], mark["partition"])] = mark
            else:
                self._dead_letter_raw(msg, "staging record that is neither a pack nor a mark")
            return
        try:
            pack = copied.decode(msg.value())
        except CodecError as err:
            self._dead_letter_raw(msg, f"staging record is not a CopiedRecords pack: {err}")
            return
        if not len(pack):
            return
        route = self.routes.get((pack.source_cluster, pack.topic, pack.partition)) or self._route(
            pack.source_cluster, pack.topic, pack.partition
        )
        self._write(pack, route)

    def _write(self, pack: copied.CopiedRecords, route: SourceRoute) -> None:
        """Every record of the pack into its target partition (the hot path)."""
        if route.exact or pack.max_record_bytes() + SIZE_SLACK > route.max_message_bytes:
            self._write_each(pack, route)  # a block per record: exact reports, size checks
            return
        produce = self.producer.produce
        topic, partition = route.target_topic, route.source.partition
        block = Block(pack.offsets)
        last = len(pack) - 1
        for i, (_, ts_ms, key, value, record_headers) in enumerate(pack.copies()):
            # Reports only for the block's first and last copy (see Block).
            report = None
            if i == 0:
                report = block.first if last else block.only
            elif i == last:
                report = block.last
            while True:
                try:
                    # By position: topic, value, key, partition, on_delivery, its alias,
                    # timestamp (0: now), headers. confluent-kafka looks each keyword up
                    # through a new str per call: ~2 µs of the ~7 µs a 1 KiB copy cost.
                    produce(
                        topic, value, key, partition, report, None, max(ts_ms, 0), record_headers
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)  # local queue full: let deliveries drain
        route.blocks.append(block)
        self._written(pack, route, len(pack), len(pack.keys) + len(pack.values))

    def _write_each(self, pack: copied.CopiedRecords, route: SourceRoute) -> None:
        """The pack record by record: each size-checked and in a block of its own."""
        written = size_total = 0
        for offset, ts_ms, key, value, record_headers in pack.copies():
            exact = record_size(key, value, record_headers)
            if exact > route.max_message_bytes:
                self._dead_letter(
                    key,
                    value,
                    record_headers,
                    route,
                    offset,
                    "RecordTooLarge",
                    f"record of {exact} bytes exceeds max.message.bytes="
                    f"{route.max_message_bytes} of target topic {route.target_topic}",
                )
                continue
            block = Block([offset])
            while True:
                try:
                    self.producer.produce(  # by position, as in _write
                        route.target_topic,
                        value,
                        key,
                        route.source.partition,
                        block.only,
                        None,
                        max(ts_ms, 0),
                        record_headers,
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
            route.blocks.append(block)
            written += 1
            size_total += (len(key) if key else 0) + (len(value) if value else 0)
        self._written(pack, route, written, size_total)

    def _written(
        self, pack: copied.CopiedRecords, route: SourceRoute, records: int, size: int
    ) -> None:
        self.txn_records += records
        route.records += records
        route.bytes += size
        route.newest_ts_ms = self.newest_ts_ms = pack.timestamps[-1]

    def _route(self, cluster_id: str, topic: str, partition: int) -> SourceRoute:
        """Where records of one source partition go (cached)."""
        source = TopicPartition(topic, partition)
        target_name = self.feed.target_topic(topic)
        assert self.targets is not None
        target = self.targets.get(target_name)
        if target is None:
            raise RetryLater(
                f"target topic {target_name!r} does not exist yet on {self.target_alias}"
            )
        if partition >= target.partitions:
            raise RetryLater(
                f"target topic {target_name!r} has {target.partitions} partition(s) but source "
                f"partition {source} needs at least {partition + 1}; add partitions on "
                f"{self.target_alias}"
            )
        route = SourceRoute(
            source=source,
            cluster_id=cluster_id,
            target_topic=target_name,
            max_message_bytes=target.max_message_bytes,
            labels=(self.feed.name, topic, str(partition)),
        )
        self.routes[(cluster_id, topic, partition)] = route
        return route

    def _produce(self, topic: str, value: Any, key: Any, hdrs: Any = None) -> None:
        """A record of crossfeed's own (sync, dead letter) into the open transaction."""
        clients.produce_waiting(self.producer, topic, value=value, key=key, headers=hdrs)

    # -- dead letters ---------------------------------------------------------------

    def _dead_letter(
        self,
        key: bytes | None,
        value: bytes | None,
        hdrs: list[Any],
        route: SourceRoute,
        offset: int,
        error_class: str,
        reason: str,
    ) -> None:
        letter = DeadLetter(
            feed=self.feed.name,
            cluster_id=route.cluster_id,
            topic=route.source.topic,
            partition=route.source.partition,
            offset=offset,
            stage="sink",
            error_class=error_class,
            error_message=reason,
        )
        self._send_dead_letter(key, value, hdrs, letter)
        route.dead_letters += 1

    def _dead_letter_raw(self, msg: Any, reason: str) -> None:
        """A staging record that is not crossfeed's: kept with its staging position."""
        letter = DeadLetter(
            feed=self.feed.name,
            cluster_id=self.target_alias,
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            stage="sink",
            error_class="NotAStagedRecord",
            error_message=reason,
        )
        self._send_dead_letter(msg.key(), msg.value(), msg.headers() or [], letter)

    def _send_dead_letter(
        self, key: bytes | None, value: bytes | None, hdrs: list[Any], letter: DeadLetter
    ) -> None:
        if self.feed.config.errors_tolerance == "none":
            raise FeedStopped(letter)
        log.warning("dead letter: %s", letter.describe())
        self._produce(topics.DLQ, value, key, letter.headers(hdrs))

    # -- transactions ---------------------------------------------------------------

    def _commit(self) -> None:
        """Copies, OffsetSyncs and input positions in one transaction."""
        # The input positions first: their round trip to the group coordinator overlaps
        # the last copies' deliveries, which the flush then waits for.
        offsets = [KafkaTP(self.changes_topic, p, o) for p, o in self.next_input.items()]
        self.producer.send_offsets_to_transaction(
            offsets, self.consumer.consumer_group_metadata(), 30
        )
        self.producer.flush(60)  # every delivery report is in before syncs are written
        syncs = 0
        for route in self.routes.values():
            if not route.blocks:
                continue
            writer = self.writers.setdefault(route.source, OffsetSyncWriter())
            for block in route.blocks:
                try:
                    writer.add_block(block.source_offsets, block.target_start())
                except TargetInterleaved:
                    route.exact = True  # the redo gets a delivery report per record
                    raise
            for run in writer.flush():
                self._produce(topics.OFFSET_SYNCS, self._sync(route, run), self._sync_key(route))
                syncs += 1
        self.producer.commit_transaction(60)
        self._after_commit(syncs)
        self._reset_txn()

    def _sync(self, route: SourceRoute, run: Any) -> bytes:
        return codec.encode(
            "OffsetSync",
            {
                "source_cluster": route.cluster_id,
                "topic": route.source.topic,
                "partition": route.source.partition,
                "source_start": run.source_start,
                "source_end": run.source_end,
                "target_topic": route.target_topic,
                "target_partition": route.source.partition,
                "target_start": run.target_start,
                "feed": self.feed.name,
            },
        )

    def _sync_key(self, route: SourceRoute) -> bytes:
        return f"{self.feed.name}/{route.source}".encode()

    def _after_commit(self, syncs: int) -> None:
        metrics.TRANSACTIONS.labels(self.feed.name).inc()
        metrics.OFFSET_SYNCS.labels(self.feed.name).inc(syncs)
        now_ms = time.time() * 1000
        for route in self.routes.values():
            if route.dead_letters:
                metrics.DLQ.labels(*route.labels).inc(route.dead_letters)
            if route.records:
                metrics.RECORDS.labels(*route.labels).inc(route.records)
                metrics.BYTES.labels(*route.labels).inc(route.bytes)
                lag = max(0.0, (now_ms - route.newest_ts_ms) / 1000)
                metrics.LAG_SECONDS.labels(*route.labels).set(lag)
        for source, mark in self.marks.items():
            # Everything of the source partition up to this mark is now in the target.
            self.checkpoints[str(source)] = mark["resolved_ts_us"]
            labels = (self.feed.name, source.topic, str(source.partition))
            metrics.CHECKPOINT_TS.labels(*labels).set(mark["resolved_ts_us"] / 1e6)
        if self.state == "error":
            log.info("feed %s: sink writing again", self.feed.name)
            self.state, self.last_error = "normal", None

    def _abort(self) -> None:
        """Abort the open transaction and rewind the input to where it began."""
        if not self.in_txn:
            return
        self._abort_producer()
        for writer in self.writers.values():
            writer.abort()
        if self.producer is not None:  # else the outcome is unknown: see _drop_producer
            assigned = self._assignment_now()
            for p, offset in self.first_offset.items():
                if p in assigned:
                    self.consumer.seek(KafkaTP(self.changes_topic, p, offset))
        metrics.ABORTS.labels(self.feed.name).inc()
        self._reset_txn()

    def _abort_producer(self) -> None:
        """Abort the producer's open transaction. If that fails — the target did not
        answer in time (librdkafka then wants the same call repeated, and refuses every
        other one meanwhile: seen after an outage, a sink stuck on "Conflicting
        abort_transaction API call is already in progress") or the producer failed for
        good — drop it: the next one's ``init_transactions`` aborts what it left open."""
        if self.producer is None:
            return
        try:
            self.producer.abort_transaction(30)
        except KafkaException as err:
            log.warning("abort failed (%s): a new producer takes over", err.args[0].str())
            self._drop_producer()

    def _drop_producer(self) -> None:
        """Let the producer go; the next step starts a new one. Whether its last
        transaction committed is not known here (a commit that timed out may still
        complete), so the input is not rewound to where that transaction began — that
        could copy its records twice — but, once the new producer's ``init_transactions``
        has settled the old transaction, to the group's committed positions, which are
        part of every transaction (``send_offsets_to_transaction``)."""
        self.producer = None
        self.writers.clear()
        self.rewind = True

    def _on_kafka_error(self, exc: KafkaException) -> None:
        err: KafkaError = exc.args[0]
        if clients.is_fenced(err):
            # A newer generation owns our partitions (we were paused or cut off): drop
            # everything in flight and start over with a fresh producer.
            log.warning("sink %s fenced (%s): restarting its producer", self.instance_id, err.str())
            self._reset_txn()
            self._drop_producer()  # a new one at the next step (the target may be away)
            return
        log.warning("transaction failed (%s); a new producer retries it", err.str())
        self._enter_error(f"transaction on {self.target_alias} failed: {err.str()}")
        # Not abort_transaction and go on with the same producer: after the target came
        # back, an abort that returned success left the broker's transaction open, and the
        # retried records joined it — one pack committed twice in one transaction. Only a
        # new producer's init_transactions (a new epoch) is sure to end it; the input is
        # then read again from the group's committed positions (_drop_producer).
        metrics.ABORTS.labels(self.feed.name).inc()
        self._reset_txn()
        self._drop_producer()

    def _on_assign(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        # Incremental (cooperative-sticky): these join what we have; the library assigns.
        self.assigned = self.assigned | {tp.partition for tp in partitions}

    def _on_revoke(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        # Partitions leave us: what we read from them must be committed (or undone) first.
        if self.in_txn:
            try:
                self._commit()
            except (RetryLater, TargetInterleaved) as err:
                log.warning("commit before revocation failed (%s); aborting", err)
                self._abort()
            except KafkaException as err:
                self._on_kafka_error(err)
        self.assigned = self.assigned - {tp.partition for tp in partitions}

    def _on_lost(self, consumer: Any, partitions: list[KafkaTP]) -> None:
        self._abort()
        self.assigned = self.assigned - {tp.partition for tp in partitions}

    # -- helpers --------------------------------------------------------------------

    def _restart_producer(self) -> bool:
        """A new transactional producer after the last one was fenced or failed for good;
        False (after a pause) while the target does not let it start."""
        try:
            self.producer = self._new_producer()
        except KafkaException as err:
            self._enter_error(
                f"cannot start a producer on {self.target_alias}: {err.args[0].str()}"
            )
            time.sleep(1.0)
            return False
        if self.rewind:
            self._rewind_to_committed()
        return True

    def _rewind_to_committed(self) -> None:
        """Read every assigned staging partition again from the group's committed position
        (from its start when the group never committed: auto.offset.reset=earliest)."""
        try:
            for tp in self.consumer.assignment():
                committed = self.consumer.committed([tp], timeout=10)[0]
                if committed.error is not None:  # unknown is not "never committed"
                    raise KafkaException(committed.error)
                offset = committed.offset if committed.offset >= 0 else OFFSET_BEGINNING
                self.consumer.seek(KafkaTP(tp.topic, tp.partition, offset))
            self.rewind = False
        except KafkaException as err:
            if clients.is_fatal(err.args[0]):
                self._replace_consumer(err.args[0])  # a new one starts from committed anyway
                self.rewind = False
            else:  # tried again at the next producer start, or after a revocation
                log.warning("could not rewind to the committed positions: %s", err)
                self.producer = None

    def _new_consumer(self) -> Any:
        """The staging reader, subscribed: the sinks of a feed share its partitions."""
        conf: dict[str, Any] = {
            "group.id": ids.sink_group(self.feed.name),
            "client.id": self.instance_id,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": int(self.settings.coordinator.failover_timeout_s * 1000),
            "heartbeat.interval.ms": 1000,
            "queued.max.messages.kbytes": 65536,
            "fetch.wait.max.ms": 50,
            "max.partition.fetch.bytes": 8 << 20,  # packs are up to puller.pack_bytes each
            **self.reachability.client_conf(),
        }
        if self.static:
            # A stable id (--instance) resumes at once on restart; it does not leave on close.
            conf["group.instance.id"] = self.instance_id
        consumer = clients.consumer(self.target_conf, **conf)
        consumer.subscribe(
            [self.changes_topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )
        return consumer

    def _replace_consumer(self, err: KafkaError) -> None:
        """A fatal consumer error ends that consumer for good (seen: a static member
        "fenced by other consumer with same group.instance.id" when the target came back
        after an outage longer than its session): drop the open transaction and read on
        with a new consumer, from the group's committed positions."""
        log.warning(
            "sink %s: staging reader failed for good (%s): starting a new one",
            self.instance_id,
            err.str(),
        )
        self._enter_error(f"staging reader failed: {err.str()}")
        if self.in_txn:
            self._abort_producer()
        for writer in self.writers.values():
            writer.abort()
        self._reset_txn()
        old, self.consumer = self.consumer, None
        self.assigned = frozenset()
        try:
            old.close()
        except KafkaException as close_err:  # a dead consumer may refuse even that
            log.debug("closing the old staging reader: %s", close_err)
        self.consumer = self._new_consumer()

    def _new_producer(self) -> Any:
        """The instance's transactional producer (KIP-447: fenced by group generation)."""
        producer = clients.producer(
            self.target_conf,
            **{
                "transactional.id": ids.sink_transactional_id(self.feed.name, self.instance_id),
                # A zombie's open transaction holds back read_committed readers this long.
                "transaction.timeout.ms": 15000,
                "linger.ms": 10,
                "batch.size": 1 << 20,
                "message.max.bytes": topics.STAGING_MAX_MESSAGE_BYTES + 1024,
                "queue.buffering.max.kbytes": 262144,
            },
        )
        producer.init_transactions(60)
        return producer

    def _enter_error(self, message: str) -> None:
        if self.last_error != message:
            log.error("feed %s: %s", self.feed.name, message)
        self.state, self.last_error = "error", message

    def _problem(self) -> str | None:
        """Why the sink makes no progress now, if it knows: the target does not answer,
        or the last transaction failed (cleared by the next commit). A sink holding no
        staging partition has nothing to be stuck on: its old failure is not reported."""
        return self.reachability.problem() or (self.last_error if self.assigned else None)

    def _heartbeat(self) -> HeartbeatContent:
        return HeartbeatContent(
            tasks=[f"{self.feed.name}/sink/{p}" for p in sorted(self.assigned)],
            feeds=[self.feed.name],
            address=self.address,
            checkpoints=dict(self.checkpoints),
            last_error=self._problem() or "",
        )

    def status(self) -> dict[str, Any]:
        problem = self._problem()
        return {
            "role": "sink",
            "instance": self.instance_id,
            "feed": self.feed.name,
            "state": "error" if problem else ("normal" if self.state == "error" else self.state),
            "last_error": problem,
            "tasks": sorted(self.assigned),
        }
