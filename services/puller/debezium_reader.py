"""An ordered feed with Debezium input (``--input debezium``): Debezium's topics on the
source cluster into ``_crossfeed.<feed>.debezium`` there, in commit order, each event
stamped with crossfeed's ordering headers (crossfeed/core/debezium_order.py has the rules;
docs/ordered-feeds.md, "Debezium input"). The feed's puller task then reads that one
partition as it reads a change producer's topic: it follows the watermarks written here.

Exactly once, as a consume-transform-produce loop on the source cluster: the ordered
records, the watermark and the read positions (with the ordering state as the commit
metadata of an offset of the output topic) commit in one Kafka transaction under
``crossfeed-debezium.<feed>``. A new reader (the puller holding the feed's task, after a
handoff or a restart) fences the old one and carries on from the committed positions.

Memory stays bounded: a data event whose transaction is not the head yet (its END not read,
or the snapshot not read to its end) waits in a buffer of at most ``MAX_BUFFER_BYTES``;
past that, the partition with the most buffered is rewound to its first waiting event and
paused until the head changes (a 1,000,000-row transaction is read twice, not held).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.cdc.registry import SchemaRegistry, read_debezium
from crossfeed.core.debezium_order import RECENT_XIDS, Emit, Joiner, drain
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.services.puller.debezium_parts import DataPartitions, Key
from crossfeed.wire import debezium, headers, ids, records, topics

log = logging.getLogger(__name__)

MAX_BUFFER_BYTES = 64 << 20
COMMIT_INTERVAL_S = 0.1
REFRESH_S = 5.0  # new tables (data topics) are picked up this often
RETRY_S = (0.5, 1.0, 2.0, 5.0)
T = TypeVar("T")


class DebeziumReader:
    """One feed's Debezium reader (run on its own thread by the puller holding the feed's
    task)."""

    def __init__(self, feed: FeedSpec, source_conf: dict[str, Any], source_cluster_id: str):
        self.feed = feed
        self.conf = source_conf
        self.cluster_id = source_cluster_id
        self.prefix = feed.debezium_prefix()
        self.txn_topic = debezium.transaction_topic(self.prefix)
        self.heartbeat_topic = debezium.heartbeat_topic(self.prefix)
        self.out = topics.debezium_ordered(feed.name)
        self.problem: str | None = None  # the last failure, for /status
        self.emitted = 0
        self.echoes = 0  # events a crossfeed sink wrote (active-active): read, not sent
        self.resolved_ts = 0
        url = feed.config.schema_registry_url
        # Debezium in Avro: its records name their schemas in this registry
        self.registry = SchemaRegistry(url) if url else None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=f"debezium-reader-{self.feed.name}")
        self._thread.daemon = True
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def _run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                _Loop(self).run(self._stop)
                return
            except KafkaException as err:
                kafka_err = err.args[0]
                if clients.is_fenced(kafka_err):
                    log.warning(
                        "debezium reader of feed %s fenced: another puller runs it", self.feed.name
                    )
                    self.problem = f"fenced: {kafka_err.str()}"
                    return
                self.problem = kafka_err.str()
            except Exception as err:  # a bug or a bad record we cannot skip: say it, retry
                log.exception("debezium reader of feed %s failed", self.feed.name)
                self.problem = f"{type(err).__name__}: {err}"
            wait = RETRY_S[min(failures, len(RETRY_S) - 1)]
            failures += 1
            log.warning(
                "debezium reader of feed %s restarts in %.1fs: %s",
                self.feed.name,
                wait,
                self.problem,
            )
            self._stop.wait(wait)

    def read(
        self,
        value: bytes | None,
        of_json: Callable[[bytes | None], T],
        of_record: Callable[[Any], T],
    ) -> T:
        """``of_json`` or ``of_record`` of a Debezium record in either format
        (crossfeed/cdc/registry.py: read_debezium); RegistryUnavailable makes the reader
        restart and read again."""
        return read_debezium(value, self.registry, of_json, of_record)

    def status(self) -> dict[str, Any]:
        return {
            "topic": self.out,
            "emitted": self.emitted,
            "echoes_dropped": self.echoes,
            "resolved_ts_us": self.resolved_ts,
            "problem": self.problem,
        }


class _Loop:
    """One run of the reader, from the committed positions until stopped or failed."""

    def __init__(self, reader: DebeziumReader) -> None:
        self.c = reader
        self.feed = reader.feed
        self.joiner = Joiner(covers=self._covers)
        self.data = DataPartitions(reader.feed, reader.txn_topic)
        self.txn_next = 0  # the transaction topic: next offset to read
        self.txn_assigned = False  # Debezium creates it with the first streamed transaction
        self.end_offsets: dict[int, int] = {}  # commit LSN -> offset of the ENDs read
        self.heartbeats: set[int] = set()  # heartbeat partitions read
        self.snapshot_until: dict[Key, int] | None = None
        self.watermark = -1  # the resolved_ts last written
        self.dirty = False
        self.last_commit = time.monotonic()
        self.last_refresh = 0.0

    def _covers(self, collection: str) -> bool:
        return self.feed.selector.selects(debezium.collection_topic(self.c.prefix, collection))

    # -- start --------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        admin = clients.admin(self.c.conf)
        kafka_topics.ensure_internal(admin, self.c.out)
        self.producer: Any = clients.transactional_producer(
            self.c.conf,
            ids.debezium_reader_transactional_id(self.feed.name),
            **{"linger.ms": 20, "queue.buffering.max.kbytes": 65536},
        )
        self.consumer: Any = clients.consumer(
            self.c.conf,
            **{
                "group.id": ids.debezium_reader_group(self.feed.name),
                "queued.max.messages.kbytes": 32768,
                "fetch.wait.max.ms": 50,
            },
        )
        try:
            self._restore(admin)
            self.c.problem = None
            self.producer.begin_transaction()
            if self.watermark < 0:  # the puller must see a watermark before any change
                self._write_watermark(self.joiner.resolved_ts())
                self.dirty = True
            while not stop.is_set():
                self._step(admin)
            self._commit()
        finally:
            self.consumer.close()
            self.producer.flush(5)

    def _restore(self, admin: Any) -> None:
        counts = kafka_topics.partition_counts(admin)
        data = self.data.of_counts(counts)
        wanted = [
            KafkaTP(self.c.out, 0),  # carries the ordering state (see _commit)
            KafkaTP(self.c.txn_topic, 0),
            *(KafkaTP(t, p) for t, p in data),
        ]
        committed = {(tp.topic, tp.partition): tp for tp in self.consumer.committed(wanted, 30)}
        carrier = committed.get((self.c.out, 0))
        state = carrier.metadata if carrier is not None and carrier.offset >= 0 else None
        found = committed.get((self.c.txn_topic, 0))
        self.txn_next = found.offset if found is not None and found.offset >= 0 else 0
        completed = _completed_before(self.c, self.txn_next)
        self.joiner.restore(state, completed)
        if state:
            self.watermark = self.joiner.resolved_ts()
        assign = self._txn_partition(counts)
        for key in data:
            tp = committed.get(key)
            offset = tp.offset if tp is not None and tp.offset >= 0 else OFFSET_BEGINNING
            assign.append(self.data.add(key, offset))
        assign.extend(self._heartbeat_partitions(counts))
        self.consumer.assign(assign)
        self.last_refresh = time.monotonic()
        log.info(
            "debezium reader of feed %s: %s -> %s from %s (%d data partitions, %d completed "
            "xids known)",
            self.feed.name,
            self.c.prefix,
            self.c.out,
            "committed positions" if state else "the beginning",
            len(self.data.parts),
            len(completed),
        )

    def _txn_partition(self, counts: dict[str, int]) -> list[KafkaTP]:
        """The transaction topic, once Debezium has created it."""
        if self.txn_assigned or self.c.txn_topic not in counts:
            return []
        self.txn_assigned = True
        return [KafkaTP(self.c.txn_topic, 0, self.txn_next)]

    def _heartbeat_partitions(self, counts: dict[str, int]) -> list[KafkaTP]:
        n = counts.get(self.c.heartbeat_topic, 0)
        fresh = [p for p in range(n) if p not in self.heartbeats]
        self.heartbeats.update(fresh)
        # Heartbeats only matter from now on: start at the end.
        return [KafkaTP(self.c.heartbeat_topic, p, -1) for p in fresh]

    # -- the loop -----------------------------------------------------------------------

    def _step(self, admin: Any) -> None:
        now = time.monotonic()
        if now - self.last_refresh >= REFRESH_S:
            self._refresh(admin)
            self.last_refresh = now
        for msg in clients.read_batch(self.consumer, 2000, 0.05):
            if msg.error():
                if not msg.error().retriable():
                    log.warning("debezium reader: read error: %s", msg.error())
                continue
            topic = msg.topic()
            if topic == self.c.txn_topic:
                self._on_txn_record(msg)
            elif topic == self.c.heartbeat_topic:
                self._on_heartbeat(msg)
            else:
                self.data.take(msg, self._event)
        self._drain()
        if self.data.buffered > MAX_BUFFER_BYTES:
            self.data.spill(self.consumer)
        self._check_snapshot()
        if time.monotonic() - self.last_commit >= COMMIT_INTERVAL_S:
            self._commit()

    def _refresh(self, admin: Any) -> None:
        counts = kafka_topics.partition_counts(admin)
        new = [
            self.data.add(key, OFFSET_BEGINNING)
            for key in self.data.of_counts(counts)
            if key not in self.data.parts
        ]
        new.extend(self._txn_partition(counts))
        new.extend(self._heartbeat_partitions(counts))
        if new:
            log.info(
                "debezium reader of feed %s: reading %s", self.feed.name, [t.topic for t in new]
            )
            self.consumer.incremental_assign(new)

    def _on_txn_record(self, msg: Any) -> None:
        offset = msg.offset()
        self.txn_next = offset + 1
        try:
            end = self.c.read(msg.value(), debezium.txn_record, debezium.txn_record_of)
        except debezium.NotDebezium as err:
            log.warning(
                "debezium reader of feed %s: %s/%d@%d skipped: %s",
                self.feed.name,
                msg.topic(),
                msg.partition(),
                offset,
                err,
            )
            return
        if end is not None:
            self._snapshot_signal()
            head = self.joiner.head_lsn()
            if self.joiner.on_end(end):
                self.end_offsets[end.lsn] = offset
            if self.joiner.head_lsn() != head:
                self.data.resume(self.consumer)  # a partition rewound for this head reads again
        self.dirty = True

    def _on_heartbeat(self, msg: Any) -> None:
        try:
            ts = self.c.read(msg.value(), debezium.heartbeat_ts_us, debezium.heartbeat_ts_us_of)
        except debezium.NotDebezium:
            return
        self._snapshot_signal()
        if self.joiner.on_heartbeat(ts):
            self.dirty = True

    def _drain(self) -> None:
        """Emit what the head allows (crossfeed/core/debezium_order.py: drain)."""
        head = self.joiner.head_lsn()
        for msg, verdict in drain(self.joiner, self.data.buffers):
            self.data.drained(msg)
            self.dirty = True
            if isinstance(verdict, Emit):
                if verdict.echo:
                    self.c.echoes += 1  # a crossfeed sink wrote it: never sent back
                else:
                    self._emit(msg, verdict)
        if self.joiner.head_lsn() != head:
            self.data.resume(self.consumer)  # a partition rewound for the new head reads again

    def _event(self, value: bytes | None) -> debezium.DataEvent | None:
        """A data event's ordering facts (None: a tombstone, which the sink would skip)."""
        if value is None:
            return None
        try:
            event = self.c.read(value, debezium.data_event, debezium.data_event_of)
        except debezium.NotDebezium:
            # Not ours to judge: it travels as a change of its own, and the sink says
            # what is wrong with it (a dead letter with its context).
            return debezium.DataEvent(None)
        if event.snapshot == "last":
            self._snapshot_signal()
        return event

    def _emit(self, msg: Any, how: Emit) -> None:
        hdrs = list(msg.headers() or [])
        hdrs.append((headers.COMMIT_TS, b"%d" % how.commit_ts))
        if how.txn is not None:
            hdrs.append((headers.TXN, how.txn.encode()))
        ts_ms = msg.timestamp()[1]
        clients.produce_copy(
            self.producer, self.c.out, msg.value(), msg.key(), 0, None, max(ts_ms, 0), hdrs
        )
        self.c.emitted += 1

    # -- the initial snapshot -----------------------------------------------------------

    def _snapshot_signal(self) -> None:
        """The snapshot has ended (its last row, an END or a heartbeat was read): once every
        data partition is read up to its current end, no snapshot row is left unread."""
        if self.joiner.streaming or self.snapshot_until is not None:
            return
        self.snapshot_until = self.data.ends(self.consumer)

    def _check_snapshot(self) -> None:
        """Streaming starts once every data partition is past its snapshot rows: read up
        to where it ended at the signal, or showing a streamed event (snapshot rows come
        first in a partition)."""
        if self.joiner.streaming or self.snapshot_until is None:
            return
        if not self.data.past(self.snapshot_until):
            return
        self.joiner.start_streaming()
        self.data.resume(self.consumer)
        self.dirty = True
        log.info("debezium reader of feed %s: initial snapshot read", self.feed.name)

    # -- committing -----------------------------------------------------------------------

    def _write_watermark(self, resolved: int) -> None:
        mark = records.resolved_mark(
            source_cluster=self.c.cluster_id,
            topic=self.c.out,
            partition=0,
            resolved_ts_us=resolved,
            next_offset=-1,
        )
        hdrs = records.resolved_mark_headers(max(resolved, 0))
        self.producer.produce(self.c.out, value=mark, key=None, partition=0, headers=hdrs)
        self.watermark = resolved
        self.c.resolved_ts = resolved

    def _commit(self) -> None:
        self.last_commit = time.monotonic()
        resolved = self.joiner.resolved_ts()
        if self.joiner.streaming and resolved > self.watermark:
            self._write_watermark(resolved)
            self.dirty = True
        if not self.dirty:
            return
        positions = [*self._txn_positions(), *self.data.positions()]
        meta = self.consumer.consumer_group_metadata()
        self.producer.send_offsets_to_transaction(positions, meta, 30)
        self.producer.commit_transaction(30)
        self.producer.begin_transaction()
        self.dirty = False

    def _txn_positions(self) -> list[KafkaTP]:
        """The transaction topic's position (the ENDs the joiner still holds are read
        again after a restart) and the ordering state, committed as the metadata of an
        offset of the output topic (which exists from the start; the group never reads
        it)."""
        state = self.joiner.snapshot_state()
        positions = [KafkaTP(self.c.out, 0, 0, metadata=state)]
        if self.txn_assigned:
            held = self.joiner.held()
            self.end_offsets = {
                lsn: self.end_offsets[lsn] for lsn in held if lsn in self.end_offsets
            }
            offset = min(self.end_offsets.values(), default=self.txn_next)
            positions.append(KafkaTP(self.c.txn_topic, 0, offset))
        return positions


def _completed_before(c: DebeziumReader, end: int) -> list[str]:
    """xids of the transactions completed before ``end`` of the transaction topic."""
    if end <= 0:
        return []
    reader: Any = clients.consumer(c.conf, **{"group.id": ids.debezium_reader_group(c.feed.name)})
    try:
        start = max(0, end - 2 * RECENT_XIDS)
        reader.assign([KafkaTP(c.txn_topic, 0, start)])
        xids: list[str] = []
        deadline = time.monotonic() + 60
        position = start
        while position < end and time.monotonic() < deadline:
            for msg in reader.consume(5000, 1.0):
                if msg.error() or msg.offset() >= end:
                    continue
                position = msg.offset() + 1
                try:
                    done = c.read(msg.value(), debezium.txn_record, debezium.txn_record_of)
                except debezium.NotDebezium:
                    continue
                if done is not None:
                    xids.append(done.xid)
            if reader.position([KafkaTP(c.txn_topic, 0)])[0].offset >= end:
                break
        return xids
    finally:
        reader.close()
