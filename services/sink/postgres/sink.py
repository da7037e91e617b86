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

A value is read by the mounter's fast path (fastmount.py: the bytes straight to a row
change) and, when that declines it, decoded and mounted the ordinary way (codec,
mapping.py), which names what is wrong with it. Rows are buffered per database
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
from crossfeed.services.sink.base import SORTED_PARTITION, OrderedSink, relax_cycle_collector
from crossfeed.services.sink.postgres import mapping
from crossfeed.services.sink.postgres.batch import Batch
from crossfeed.services.sink.postgres.debezium import DebeziumMounter
from crossfeed.services.sink.postgres.fastmount import FastMounter
from crossfeed.services.sink.postgres.mapping import Misfit, RowChange, TableSchema
from crossfeed.services.sink.schemas import UnknownSchema, reference
from crossfeed.services.sink.sorted_stream import Applied, Position
from crossfeed.wire import codec
from crossfeed.wire.codec import CodecError

log = logging.getLogger(__name__)

MAX_ROWS = 10_000  # rows held per buffer before they are written (bounded memory)
BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)
LOST = (psycopg.OperationalError, psycopg.InterfaceError)


class Fenced(RuntimeError):
    """The position row moved under this instance: another one applies the feed."""


class Refused(RuntimeError):
    """The database refused a write of the batch (not a lost connection)."""


class PostgresSink(OrderedSink):
    def _init_target(self) -> None:
        self.done = Batch()  # whole source transactions not yet written
        # The open source transaction's changes not yet written, in order: a list, merged
        # into the batch (self.done) once the transaction is whole, or written under a
        # SAVEPOINT when MAX_ROWS of them are held (one batch operation per change).
        self.open: list[RowChange] = []
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
        self.tables: dict[str, TableSchema | None] = {}
        self.mounter = mapping.Mounter()
        # Debezium input: its envelopes, mapped by the Connect schema in each event.
        url = self.feed.config.schema_registry_url
        # Debezium in Avro: the schemas its records name, from the registry (once per id)
        self.registry = SchemaRegistry(url) if url else None
        self.debezium = (
            DebeziumMounter(self._schema, self.registry.schema if self.registry else None)
            if self.feed.input == "debezium"
            else None
        )
        self.fast = FastMounter(codec.fingerprint("ChangeEvent"))
        # (table, schema_version, shape) known to fit the table as cached in self.tables
        self.fitted: set[tuple[str, int, tuple[str, tuple[str, ...]]]] = set()
        self.sql: dict[tuple[str, tuple[str, tuple[str, ...]], tuple[str, ...]], str] = {}
        self.failures = 0
        self.careful_until = -1  # write change by change (savepoints) below this offset
        self.syncpoint = (0, 0)  # newest (consistency_ts µs, target time ms)
        self.epoch = 0  # the position row's fencing epoch when this instance took the feed
        self.last_syncpoint = 0.0

    def _reset_txn(self) -> None:
        super()._reset_txn()
        self.savepoint = False  # the open source transaction has rows under a SAVEPOINT
        self.done.clear()
        self.open.clear()

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
            options="-c default_transaction_read_only=off",
        )
        try:
            # A session lock: it stays through commits and rollbacks, and goes with the
            # connection (a dead instance's is released when its connection closes).
            got = conn.execute(
                "SELECT pg_try_advisory_lock(hashtext('crossfeed-sink'), hashtext(%s))",
                (self.feed.name,),
            ).fetchone()
            conn.commit()
            if not (got and got[0]):
                conn.close()
                if self.state != "standby":
                    log.info(
                        "feed %s: another sink instance applies it; standing by", self.feed.name
                    )
                self.state = "standby"
                stop.wait(1.0)
                return
            for statement in mapping.bookkeeping_ddl(self.schema):
                try:
                    conn.execute(statement)
                    conn.commit()
                except psycopg.errors.UniqueViolation:  # created by someone else just now
                    conn.rollback()
            fencing.ensure_columns(conn, self.schema)
            self._prepare_session(conn)
            position = mapping.qualified(self.schema, mapping.POSITION_TABLE)
            conn.execute(
                f"INSERT INTO {position} (feed, commit_ts, txn, checkpoint_ts, sorted_offset) "
                "VALUES (%s, -1, '', 0, -1) ON CONFLICT (feed) DO NOTHING",
                (self.feed.name,),
            )
            row = conn.execute(
                f"SELECT commit_ts, txn, checkpoint_ts, sorted_offset, epoch, failed_over_at "
                f"FROM {position} WHERE feed = %s",
                (self.feed.name,),
            ).fetchone()
            conn.commit()
        except BaseException:
            conn.close()
            raise
        assert row is not None
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

    def _opened(self) -> None:
        self.savepoint = False

    def _cut_short(self) -> bool:
        self.open.clear()
        if self.savepoint:
            self._execute("ROLLBACK TO SAVEPOINT cf_txn")
            self._forget_tables()  # DDL may have been rolled back with it
            self.savepoint = False
        return True

    def _apply(self, msg: Any, hdrs: list[Any] | None) -> None:
        open_txn = self.sequencer.open
        assert open_txn is not None
        # Careful mode (after the database refused a batch): each change under its own
        # savepoint, so the one refused goes to the DLQ alone.
        careful = self.next_offset <= self.careful_until
        if careful:
            self._ensure_savepoint()
            self._execute("SAVEPOINT cf_row")
        try:
            value = msg.value()
            if self.debezium is None:
                change = self._mount(value, open_txn.position.commit_ts)
            else:
                # A change kept by reference is mounted from its payload as it is (its
                # schema looked up once per id), not joined to its schema again first.
                sid = reference(value, hdrs)
                ts = open_txn.position.commit_ts
                mounted = self._mount_debezium(self.debezium, msg.key(), value, ts, sid)
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

    def _mount_debezium(
        self,
        mounter: DebeziumMounter,
        key: bytes | None,
        value: bytes | None,
        commit_ts: int,
        sid: bytes | None,
    ) -> RowChange | None:
        return mounter.mount(key, value, commit_ts, sid)

    def _schema(self, sid: bytes) -> bytes:
        """A Debezium schema's bytes by id (the feed's schemas topic)."""
        assert self.schemas is not None, "a Debezium feed's sink reads its schemas topic"
        return self.schemas.get(sid)

    def _mount(self, value: bytes | None, commit_ts: int) -> RowChange:
        if not value:
            raise Misfit("NoValue", "data record without a value (not a ChangeEvent)")
        fast = self.fast.mount(value, commit_ts)
        if fast is not None:
            return fast
        try:
            event = codec.decode("ChangeEvent", value)
        except CodecError as err:
            raise Misfit("UndecodableValue", f"not a ChangeEvent: {err}") from None
        return self.mounter.mount(event, commit_ts)

    def _truncate(self, change: RowChange) -> None:
        """A source TRUNCATE, where it stands in the order: what came before is written
        first, inside the open transaction's savepoint (a cut short takes it back)."""
        self._spill_open()
        if self._table(change.table) is None:
            return  # nothing was ever written there
        assert self.conn is not None
        try:
            self.conn.execute(mapping.truncate(self.schema, change.table), (change.commit_ts,))
        except LOST:
            raise
        except psycopg.Error as err:
            raise Refused(f"the database refused a truncate: {err}") from err

    def _completed(self) -> None:
        """The open source transaction is whole: its changes join the batch."""
        self._hold(self.open)
        self.open.clear()
        if self.savepoint:
            self._execute("RELEASE SAVEPOINT cf_txn")
            self.savepoint = False
        if len(self.done) >= MAX_ROWS:
            self._write(self.done)

    def _spill_open(self) -> None:
        """Write the open source transaction's changes so far, under its savepoint (the
        whole ones before it first: order)."""
        self._write(self.done)
        self._ensure_savepoint()
        self._hold(self.open)
        self.open.clear()
        self._write(self.done)

    def _hold(self, changes: list[RowChange]) -> None:
        """``changes`` into the batch, in order, writing the batch first whenever one
        cannot merge with what it holds."""
        held = self.done.add_many(changes, 0)
        while held < len(changes):
            self._write(self.done)
            held = self.done.add_many(changes, held)

    def _ensure_savepoint(self) -> None:
        if not self.savepoint:
            self._execute("SAVEPOINT cf_txn")
            self.savepoint = True

    # -- tables ---------------------------------------------------------------------

    def _fit(self, change: RowChange) -> None:
        """Make sure ``change``'s table can take it (DDL when needed), else Misfit."""
        known = (change.table, change.schema_version, change.shape)
        if change.op != "ddl" and known in self.fitted:
            return
        existing = self._table(change.table)
        plan = mapping.plan(self.schema, existing, change, self.auto_create)
        if not plan.statements:
            self.fitted.add(known)
            return
        # DDL is a barrier: what came before is written before it; inside the open
        # source transaction's savepoint, so a cut short one takes it back.
        self._spill_open()
        for statement in plan.statements:
            log.info("feed %s: %s", self.feed.name, statement)
            self._execute(statement)
        self._forget_tables()

    def _forget_tables(self) -> None:
        """What is known of the tables may be wrong now (DDL ran or was rolled back)."""
        self.tables.clear()
        self.fitted.clear()

    def _table(self, table: str) -> TableSchema | None:
        if table in self.tables:
            return self.tables[table]
        assert self.conn is not None
        name = mapping.qualified(self.schema, table)
        columns = self.conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
            "ORDER BY a.attnum",
            (name,),
        ).fetchall()
        if not columns:
            self.tables[table] = None
            return None
        key = self.conn.execute(
            "SELECT a.attname FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary ORDER BY k.ord",
            (name,),
        ).fetchall()
        schema = TableSchema({c: t for c, t in columns}, tuple(k for (k,) in key))
        self.tables[table] = schema
        return schema

    # -- writing --------------------------------------------------------------------

    def _statement(
        self, table: str, shape: tuple[str, tuple[str, ...]], first: RowChange
    ) -> tuple[str, tuple[str, ...]]:
        """The statement writing a group of ``shape`` and its arrays' types (of the
        columns it sets, or of the key); ``first``: a change of the group."""
        kinds = {c.name: c.type for c in first.columns}
        op, columns = shape
        key = first.key_columns
        types = tuple(kinds[c] for c in (columns if op == "upsert" else key))
        cached = self.sql.get((table, shape, types))
        if cached is None:
            if op == "upsert":
                cached = mapping.upsert_many(self.schema, table, columns, types, key)
            else:
                cached = mapping.delete_many(self.schema, table, key, types)
            self.sql[(table, shape, types)] = cached
        return cached, types

    def _write(self, batch: Batch) -> None:
        """Every change of ``batch``: one statement per statement shape, its rows as
        arrays (mapping.upsert_many)."""
        if not len(batch):
            return
        assert self.conn is not None
        try:
            with self.conn.cursor() as cur:
                for table, shape, changes in batch.groups():
                    sql, types = self._statement(table, shape, changes[0])
                    stamps = [c.commit_ts for c in changes]
                    if shape[0] == "upsert":
                        rows = [c.values.values() for c in changes]
                        cur.execute(sql, mapping.column_arrays(rows, types, stamps))
                        skipped = len(changes) - max(cur.rowcount, 0)
                        if skipped:
                            self.skipped[table] = self.skipped.get(table, 0) + skipped
                    else:
                        keys = [c.key for c in changes]
                        cur.execute(sql, mapping.column_arrays(keys, types, stamps))
        except LOST:
            raise
        except psycopg.Error as err:
            raise Refused(f"the database refused a write: {err}") from err
        batch.clear()

    def _execute(self, statement: str) -> None:
        assert self.conn is not None
        try:
            self.conn.execute(statement)
        except LOST:
            raise
        except psycopg.Error as err:
            raise Refused(f"the database refused {statement[:80]!r}: {err}") from err

    def _commit(self) -> None:
        """The batch, the position and maybe a syncpoint, in one database transaction."""
        assert self.conn is not None and self.sequencer.open is None
        self._write(self.done)
        applied = self._next_applied()
        position = mapping.qualified(self.schema, mapping.POSITION_TABLE)
        moved = self.conn.execute(
            f"UPDATE {position} SET commit_ts = %s, txn = %s, checkpoint_ts = %s, "
            "sorted_offset = %s, updated_at = now() WHERE feed = %s AND sorted_offset = %s "
            "AND epoch = %s",
            (
                applied.position.commit_ts,
                applied.position.txn,
                applied.checkpoint_ts,
                self.next_offset,
                self.feed.name,
                self.committed_offset,
                self.epoch,
            ),
        ).rowcount
        if moved != 1:
            raise Fenced(
                f"the position row of feed {self.feed.name} is no longer at sorted offset "
                f"{self.committed_offset} under epoch {self.epoch}: another sink instance "
                "applied the feed, or it was failed over"
            )
        syncpoint = None
        now = time.monotonic()
        if now - self.last_syncpoint >= self.syncpoint_every_s:
            # The database now holds exactly the source's state as of this timestamp: every
            # transaction up to the applied one, and none between it and R.
            consistency = max(applied.checkpoint_ts, applied.position.commit_ts)
            if consistency > 0:
                row = self.conn.execute(
                    f"INSERT INTO {mapping.qualified(self.schema, mapping.SYNCPOINT_TABLE)} "
                    "(feed, consistency_ts, target_ts) VALUES (%s, %s, clock_timestamp()) "
                    "ON CONFLICT DO NOTHING "
                    "RETURNING (extract(epoch from target_ts) * 1000)::bigint",
                    (self.feed.name, consistency),
                ).fetchone()
                if row is not None:
                    syncpoint = (consistency, int(row[0]))
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
