"""The PostgreSQL sink of ordered feeds: ``_crossfeed.<feed>.sorted`` -> tables in one
schema (``--sink-uri postgresql://user@host:port/db?schema=S``), docs/ordered-feeds.md §4.

Each change event is decoded (the mounter, mapping.py) and written as an upsert or a
delete by primary key, last writer wins on the hidden ``_crossfeed_commit_ts`` column.
Whole source transactions only: a database transaction holds one or several of them
(``sink.commit_interval_ms``, ``sink.max_batch_records``), and commits only between them,
so a reader of the database never sees a torn source transaction. The applied position,
checkpoint_ts and the sorted offset to resume from are a row of ``crossfeed_position``
written in that same database transaction: a restart resumes exactly there, and the
:class:`~crossfeed.services.sink.sorted_stream.Sequencer` drops replays at or below it. Every
``syncpoint.interval`` seconds the commit also adds a ``crossfeed_syncpoint`` row
(feed, consistency_ts, target time): the database then held the source's state as of
consistency_ts (TiCDC's syncpoint).

A value becomes a row change by the feed's one decoder (decoders.py): for ChangeEvents
the fast path (fastmount.py: the bytes straight to a row change) and, when that declines
it, the ordinary way (codec, mapping.py), which names what is wrong with it; for Debezium
its envelopes (debezium.py). The rows are written by writer.py; the position and
syncpoint rows are position.py's, the feed's lock lock.py's. Rows are buffered per database
transaction, merged per row (batch.py), and written with one statement per table and
shape whose rows are arrays, one per column (``INSERT ... SELECT * FROM unnest(...) ON
CONFLICT ...``, ``DELETE ... USING unnest(...)``): the database plans and runs one
statement for thousands of rows. At most ``MAX_ROWS`` are held, so a source transaction
of a million changes is streamed: its rows are written under a SAVEPOINT, which a
transaction cut short rolls back alone.

One instance applies at a time: it holds a PostgreSQL advisory lock on the feed, and
every commit moves the position row only from where this instance last left it (another
writer makes the commit fail and the instance start over). A lost connection or a
database restart: the open transaction is gone with it; the sink reconnects with backoff,
reads the position row and reads the sorted stream again from there — nothing lost,
nothing applied twice.

A change that does not fit (type mismatch, missing key, unknown table or column with
``postgres.auto.create=false``, undecodable value, a row the database refuses) goes to
``_crossfeed.dlq`` with the context headers and the reason; with ``errors.tolerance=none``
the feed stops (exit 3). A row the database refuses is found by writing the batch again
change by change, each under its own SAVEPOINT.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import psycopg
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed import fencing
from crossfeed.cdc.registry import RegistryUnavailable, SchemaRegistry
from crossfeed.config.settings import resolve_references
from crossfeed.dlq import FeedStopped
from crossfeed.kafka import clients
from crossfeed.membership import HeartbeatContent
from crossfeed.services.sink import metrics
from crossfeed.services.sink.base import SORTED_PARTITION, relax_cycle_collector
from crossfeed.services.sink.postgres import lock, position
from crossfeed.services.sink.postgres.batch import Batch
from crossfeed.services.sink.postgres.debezium import DebeziumMounter
from crossfeed.services.sink.postgres.decoders import Decoder
from crossfeed.services.sink.postgres.mapping import Misfit
from crossfeed.services.sink.postgres.position import Fenced
from crossfeed.services.sink.postgres.writer import LOST, MAX_ROWS, PostgresWriter, Refused
from crossfeed.services.sink.schemas import UnknownSchema
from crossfeed.services.sink.sorted_stream import Applied, Position

log = logging.getLogger(__name__)

BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)


class PostgresSink(PostgresWriter):
    def _init_target(self) -> None:
        self._init_writer()
        sink = self.feed.sink
        assert sink.dsn is not None
        # A ${env:NAME} or ${file:PATH} password in the URI is read here, in the sink's own
        # environment: the stored feed (and every answer about it) holds only the reference.
        self.dsn = resolve_references(sink.dsn, "the sink URI")
        self.schema = sink.schema_name or "public"
        self.alias = self.settings.staging_alias(None)
        self.kafka_conf = self.settings.cluster(self.alias).client_config()
        self.auto_create = self.feed.config.postgres_auto_create
        self.syncpoint_every_s = self.feed.config.syncpoint_interval_s
        self.consumer: Any = None
        self.dlq: Any = None
        self.conn: psycopg.Connection[Any] | None = None
        # Debezium in Avro: the schemas its records name, from the registry (once per id)
        url = self.feed.config.schema_registry_url
        self.registry = SchemaRegistry(url) if url else None
        # the one way this feed's records become row changes (decoders.py)
        self.decoder: Decoder = self.input.decoder(self._debezium_mounter)
        self.failures = 0
        self.careful_until = -1  # write change by change (savepoints) below this offset
        self.syncpoint = (0, 0)  # newest (consistency_ts µs, target time ms)
        self.epoch = 0  # the position row's fencing epoch when this instance took the feed
        self.last_syncpoint = 0.0

    # -- lifecycle ------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        relax_cycle_collector()
        self._prepare_cluster(self.alias, self.kafka_conf, stop)
        self.dlq = clients.producer(self.kafka_conf, **{"linger.ms": 5})
        # Assigned, not subscribed (the advisory lock says who applies); the group's
        # offsets are committed for monitoring only: the position lives in the database.
        self.consumer = clients.consumer(self.kafka_conf, **self._consumer_conf())
        self._start_heartbeats()
        log.info(
            "postgresql sink %s started for feed %s (%s -> schema %s)",
            self.instance_id,
            self.feed.name,
            self.sorted_topic,
            self.schema,
        )

    def shutdown(self) -> None:
        if self.conn is not None:
            try:
                if self.in_txn and self.sequencer.open is None:
                    self._commit()
            except (*LOST, Fenced, Refused, psycopg.Error) as err:
                log.warning("final commit failed: %s", err)
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self._close(self.consumer, self.dlq)

    # -- the loop -------------------------------------------------------------------

    def step(self, stop: threading.Event) -> None:
        try:
            if self.conn is None:
                self._connect(stop)
                return
            self._read_and_commit(self.consumer)
        except FeedStopped:
            self._drop_connection()
            raise
        except Refused as err:
            log.warning("feed %s: %s; writing it again change by change", self.feed.name, err)
            self.careful_until = max(self.next_offset, self.careful_until)
            self._restart_from_committed()
        except (*LOST, Fenced, RegistryUnavailable) as err:
            # RegistryUnavailable: the open transaction is rolled back and read again
            # once the registry answers; nothing goes to the DLQ for it
            self._lost(err, stop)

    # -- connection -----------------------------------------------------------------

    def _connect(self, stop: threading.Event) -> None:
        """Connect, take the feed's lock, read the position and read the stream from it."""
        # Never read-only: a database that a switchover made read-only for applications
        # (docs/disaster-recovery.md) is still this feed's target.
        conn = psycopg.connect(
            self.dsn,
            autocommit=False,
            connect_timeout=5,
            options=fencing.WRITABLE_SESSION,
        )
        try:
            if not lock.take(conn, self.feed.name):
                conn.close()
                if self.state != "standby":
                    log.info(
                        "feed %s: another sink instance applies it; standing by", self.feed.name
                    )
                self.state = "standby"
                stop.wait(1.0)
                return
            position.prepare(conn, self.schema)
            self._prepare_session(conn)
            row = position.read(conn, self.schema, self.feed.name)
            conn.commit()
        except BaseException:
            conn.close()
            raise
        if row[5] is not None:  # failed over (crossfeed/fencing.py)
            conn.close()  # the lock goes with the session
            message = (
                f"feed {self.feed.name} was failed over at {row[5]:%Y-%m-%d %H:%M:%S%z}: its "
                "target is the primary now; this sink applies nothing (fenced)"
            )
            if self.last_error != message:
                log.error("%s", message)
            self.state, self.last_error = "fenced", message
            stop.wait(5.0)
            return
        self.conn = conn
        self.epoch = int(row[4])
        self.committed = Applied(Position(row[0], row[1]), row[2])
        self.committed_offset = row[3]
        self._reposition()
        self.failures = 0
        if self.state in ("error", "starting", "standby"):
            self.state, self.last_error = "normal", None
        log.info(
            "feed %s: sink %s applies from sorted offset %d, applied %s, checkpoint_ts %d",
            self.feed.name,
            self.instance_id,
            self.committed_offset,
            self.committed.position.describe(),
            self.committed.checkpoint_ts,
        )

    def _prepare_session(self, conn: psycopg.Connection[Any]) -> None:
        """What a connection needs once it holds the feed's lock (none here)."""

    def _reposition(self) -> None:
        """Forget everything not committed; read the stream again from the position."""
        self._reset_txn()
        self._forget_tables()
        self._restart_sequencer()
        offset = self.committed_offset if self.committed_offset >= 0 else OFFSET_BEGINNING
        self.consumer.assign([KafkaTP(self.sorted_topic, SORTED_PARTITION, offset)])

    def _restart_from_committed(self) -> None:
        assert self.conn is not None
        try:
            self.conn.rollback()
        except LOST:
            self._drop_connection()
            return
        metrics.ABORTS.labels(*self.labels).inc()
        self._reposition()

    def _drop_connection(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self.conn = None
        self._reset_txn()

    def _lost(self, err: Exception, stop: threading.Event) -> None:
        self._drop_connection()
        delay = BACKOFF_S[min(self.failures, len(BACKOFF_S) - 1)]
        self.failures += 1
        metrics.RETRIES.labels(*self.labels).inc()
        message = f"PostgreSQL: {str(err).strip() or type(err).__name__}; retrying in {delay}s"
        if self.last_error != message:
            log.warning("feed %s: %s", self.feed.name, message)
        self.state, self.last_error = "error", message
        stop.wait(delay)

    # -- records --------------------------------------------------------------------

    def _apply(self, msg: Any, hdrs: list[Any] | None) -> None:
        open_txn = self.sequencer.applying  # (an inline transaction's last record: done)
        assert open_txn is not None
        # Careful mode (after the database refused a batch): each change under its own
        # savepoint, so the one refused goes to the DLQ alone.
        careful = self.next_offset <= self.careful_until
        if careful:
            self._ensure_savepoint()
            self._execute("SAVEPOINT cf_row")
        try:
            value = msg.value()
            mounted = self.decoder.decode(msg.key(), value, open_txn.position.commit_ts, hdrs)
            if mounted is None:  # nothing to apply (a tombstone, a message)
                if careful:
                    self._execute("RELEASE SAVEPOINT cf_row")
                return
            change = mounted
            if change.op == "truncate":
                self._truncate(change)
                if careful:
                    self._execute("RELEASE SAVEPOINT cf_row")
                return
            self._fit(change)
            if careful and change.op != "ddl":
                batch = Batch()
                batch.add(change)
                self._write(batch)
        except (Misfit, UnknownSchema) as err:
            if careful:
                self._execute("RELEASE SAVEPOINT cf_row")
            error_class = err.error_class if isinstance(err, Misfit) else "UnknownSchema"
            self._dead_letter_here(msg, error_class, str(err))
            return
        except Refused as err:
            if not careful:
                raise
            self._execute("ROLLBACK TO SAVEPOINT cf_row")
            self._forget_tables()
            cause = err.__cause__ or err
            self._dead_letter_here(msg, type(cause).__name__, f"the database refused it: {cause}")
            return
        if careful:
            self._execute("RELEASE SAVEPOINT cf_row")
        self.txn_events += 1
        self.txn_bytes += len(value or b"") + len(msg.key() or b"")
        self.newest_ts_ms = msg.timestamp()[1]
        if careful or change.op == "ddl":
            return  # written already (ddl: by _fit, a barrier)
        self.open.append(change)
        if len(self.open) >= MAX_ROWS:
            self._spill_open()

    def _debezium_mounter(self) -> DebeziumMounter:
        return DebeziumMounter(self._schema, self.registry.schema if self.registry else None)

    def _schema(self, sid: bytes) -> bytes:
        """A Debezium schema's bytes by id (the feed's schemas topic)."""
        assert self.schemas is not None, "a Debezium feed's sink reads its schemas topic"
        return self.schemas.get(sid)

    def _commit(self) -> None:
        """The batch, the position and maybe a syncpoint, in one database transaction."""
        assert self.conn is not None and self.sequencer.open is None
        self._write(self.done)
        applied = self._next_applied()
        offsets = (self.committed_offset, self.next_offset)
        position.move(self.conn, self.schema, self.feed.name, applied, offsets, self.epoch)
        syncpoint = None
        now = time.monotonic()
        if now - self.last_syncpoint >= self.syncpoint_every_s:
            # The database now holds exactly the source's state as of this timestamp: every
            # transaction up to the applied one, and none between it and R.
            consistency = max(applied.checkpoint_ts, applied.position.commit_ts)
            if consistency > 0:
                syncpoint = position.add_syncpoint(
                    self.conn, self.schema, self.feed.name, consistency
                )
        if self.txn_dead:
            self.dlq.flush(30)  # dead letters are in Kafka before the position passes them
        started = time.monotonic()
        self.conn.commit()
        metrics.TRANSACTION_COMMIT_SECONDS.labels(self.feed.name).observe(
            time.monotonic() - started
        )
        self.committed = applied
        self.committed_offset = self.next_offset
        if syncpoint is not None:
            self.syncpoint, self.last_syncpoint = syncpoint, now
            metrics.SYNCPOINT_TS.labels(*self.labels).set(syncpoint[0] / 1e6)
        self._count_commit()
        self.consumer.commit(
            offsets=[KafkaTP(self.sorted_topic, SORTED_PARTITION, self.committed_offset)],
            asynchronous=True,
        )
        self._reset_txn()

    def _dead_letter_here(self, msg: Any, error_class: str, reason: str) -> None:
        self._dead_letter(msg, error_class, reason, self.dlq, self.alias)
        self.dlq.poll(0)

    # -- reporting ------------------------------------------------------------------

    def _heartbeat(self) -> HeartbeatContent:
        return self._heartbeat_content(
            self.conn is not None,
            syncpoint_ts_us=self.syncpoint[0],
            syncpoint_at_ms=self.syncpoint[1],
        )

    def status(self) -> dict[str, Any]:
        return self._status(
            self.conn is not None,
            f"postgresql schema {self.schema}",
            syncpoint_ts_us=self.syncpoint[0],
            syncpoint_at_ms=self.syncpoint[1],
        )
