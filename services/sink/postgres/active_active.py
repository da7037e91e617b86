"""The PostgreSQL sink of one direction of an active-active pair (docs/active-active.md).

Both databases take application writes; each direction's sink applies the other side's
Debezium changes into the application's own tables, last writer wins on source commit
times (crossfeed/pair/sql.py holds the rule as SQL). Everything else is the ordinary
PostgreSQL sink's: whole source transactions, the position row in the same database
transaction, the advisory lock, reconnects, dead letters.

What differs:

* the session says it is crossfeed's (``crossfeed.applying``: the pair's triggers leave the
  hidden columns and tombstones to it) and writes under the replication origin
  ``crossfeed:<feed>``, so that the other direction's Debezium reader drops what it writes:
  nothing is sent back;
* each change goes through the apply function, in commit order and never merged with
  another (a counter needs every difference, and every lost change is recorded);
* tables are the application's: they are never created here, only given the hidden
  columns and triggers when first seen (``crossfeed pair create`` does it beforehand);
* conflicts are counted (``crossfeed_sink_conflicts_total``) and the newest
  ``active_active.conflicts_kept`` of them kept in ``crossfeed_conflicts``; tombstones are
  kept ``active_active.tombstone_window_s``.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any

import orjson
import psycopg

from crossfeed.pair import sql
from crossfeed.services.sink import metrics
from crossfeed.services.sink.postgres import mapping
from crossfeed.services.sink.postgres.batch import Batch
from crossfeed.services.sink.postgres.debezium import DebeziumMounter
from crossfeed.services.sink.postgres.mapping import Misfit, RowChange
from crossfeed.services.sink.postgres.sink import LOST, Fenced, PostgresSink, Refused

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 60.0


class Replicated(RowChange):
    """A row change with what last writer wins needs: the source's commit time, whether
    it is a snapshot row, and each counter column's difference."""

    __slots__ = ("deltas", "snapshot", "source_us")

    source_us: int
    snapshot: bool
    deltas: dict[str, Any] | None


class InOrder(Batch):
    """Every change, in order, none merged (the apply function needs each one)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[RowChange] = []

    def __len__(self) -> int:
        return len(self.held)

    def add_many(self, changes: Sequence[RowChange], start: int) -> int:
        self.held.extend(changes[start:])
        self.changes += len(changes) - start
        return len(changes)

    def all(self) -> Iterator[RowChange]:
        yield from self.held

    def clear(self) -> None:
        self.held.clear()
        self.changes = 0


class ActiveActiveSink(PostgresSink):
    def _init_target(self) -> None:
        super()._init_target()
        self.done = InOrder()
        config = self.feed.config
        assert config.active_active_side and config.active_active_target_side
        self.side = config.active_active_side
        self.local = config.active_active_target_side
        self.counters = config.counters()
        self.ready: set[str] = set()  # tables seen with hidden columns and triggers
        self.call = sql.apply_call(self.schema)
        self.conflicts = {sql.WON: 0, sql.LOST: 0}
        self.last_prune = 0.0

    # -- the session ----------------------------------------------------------------------

    def _prepare_session(self, conn: psycopg.Connection[Any]) -> None:
        """The pair's functions, the applying flag and the replication origin."""
        for statement in sql.schema_ddl(self.schema):
            conn.execute(statement)
        conn.commit()
        name = sql.origin(self.feed.name)
        conn.execute(f"SET {sql.APPLYING_SETTING} = 'on'")
        conn.execute(
            "SELECT pg_replication_origin_create(%(o)s) WHERE NOT EXISTS "
            "(SELECT 1 FROM pg_replication_origin WHERE roname = %(o)s)",
            {"o": name},
        )
        try:
            conn.execute("SELECT pg_replication_origin_session_setup(%s)", (name,))
        except psycopg.errors.ObjectInUse as err:  # a sink that died is still connected
            raise Fenced(f"replication origin {name} is in use: {err}") from err
        conn.commit()
        self.ready.clear()

    # -- changes --------------------------------------------------------------------------

    def _mount_debezium(
        self,
        mounter: DebeziumMounter,
        key: bytes | None,
        value: bytes | None,
        commit_ts: int,
        sid: bytes | None,
    ) -> RowChange | None:
        # the table is known only once the event is read: ask for every counter's old value
        # of any table, and keep those of this one
        every = frozenset(c for columns in self.counters.values() for c in columns)
        written = mounter.mount_written(key, value, commit_ts, sid, every)
        if written is None:
            return None
        change = written.change
        table_counters = self.counters.get(change.table, frozenset())
        replicated = Replicated(
            change.table,
            change.op,
            change.key,
            change.values,
            change.commit_ts,
            change.columns,
            change.ddl,
            change.schema_version,
        )
        replicated.source_us = written.source_us
        replicated.snapshot = written.snapshot
        replicated.deltas = None
        if change.op == "upsert" and table_counters and not written.snapshot:
            deltas = {}
            for column in table_counters & set(change.values):
                new = change.values[column]
                old = 0 if written.insert else written.old.get(column)
                deltas[column] = (new or 0) - (old or 0)
            replicated.deltas = deltas
        return replicated

    def _fit(self, change: RowChange) -> None:
        """An application's table: never created here; given the hidden columns and
        triggers when first seen; new columns added as the ordinary sink does."""
        if change.table not in self.ready:
            existing = self._table(change.table)
            if existing is None:
                raise Misfit(
                    "UnknownTable",
                    f"table {self.schema}.{change.table} does not exist: an active-active "
                    "pair applies into tables that exist on both sides (create it there too)",
                )
            assert self.conn is not None
            name = mapping.qualified(self.schema, change.table)
            found = self.conn.execute(sql.table_ready_query(), {"t": name}).fetchone()
            if found is None or tuple(found) != (2, 2):
                self._spill_open()  # DDL is a barrier
                for statement in sql.table_ddl(self.schema, change.table, existing.primary_key):
                    log.info("feed %s: %s", self.feed.name, statement)
                    self._execute(statement)
                self._forget_tables()
            self.ready.add(change.table)
        known = (change.table, change.schema_version, change.shape)
        if change.op != "ddl" and known in self.fitted:
            return
        existing = self._table(change.table)
        plan = mapping.plan(self.schema, existing, change, self.auto_create, commit_ts_column=False)
        if not plan.statements:
            self.fitted.add(known)
            return
        self._spill_open()
        for statement in plan.statements:
            log.info("feed %s: %s", self.feed.name, statement)
            self._execute(statement)
        self._forget_tables()

    def _forget_tables(self) -> None:
        super()._forget_tables()
        self.ready.clear()

    def _truncate(self, change: RowChange) -> None:
        """A TRUNCATE on the other side: the rows older than it (no tombstones)."""
        assert isinstance(change, Replicated)
        self._spill_open()
        if self._table(change.table) is None:
            return
        assert self.conn is not None
        try:
            self.conn.execute(
                sql.truncate(self.schema, change.table),
                {"ts": change.source_us, "side": self.side, "local": self.local},
            )
        except LOST:
            raise
        except psycopg.Error as err:
            raise Refused(f"the database refused a truncate: {err}") from err

    # -- writing --------------------------------------------------------------------------

    def _write(self, batch: Batch) -> None:
        """Each change through the apply function, in order (one pipelined round trip)."""
        if not len(batch):
            return
        assert self.conn is not None
        params = [self._params(c) for c in batch.all()]
        tables = [p[1] for p in params]
        outcomes: list[str] = []
        try:
            with self.conn.cursor() as cur:
                cur.executemany(self.call, params, returning=True)
                while True:
                    row = cur.fetchone()
                    outcomes.append(str(row[0]) if row else "")
                    if not cur.nextset():
                        break
        except LOST:
            raise
        except psycopg.Error as err:
            raise Refused(f"the database refused a write: {err}") from err
        for table, outcome in zip(tables, outcomes, strict=True):
            if outcome == sql.LOST:
                self.skipped[table] = self.skipped.get(table, 0) + 1
            if outcome in self.conflicts:
                self.conflicts[outcome] += 1
                metrics.CONFLICTS.labels(self.feed.name, outcome).inc()
        batch.clear()

    def _params(self, change: RowChange) -> tuple[Any, ...]:
        assert isinstance(change, Replicated)
        kinds = {c.name: c.type for c in change.columns}
        key = {c: v for c, v in zip(change.key_columns, change.key, strict=True)}
        row = change.values if change.op == "upsert" else {}
        return (
            self.feed.name,
            change.table,
            change.op,
            _json(row, kinds),
            _json(key, kinds),
            _json(change.deltas, kinds) if change.deltas else None,
            0 if change.snapshot else change.source_us,
            self.side,
            self.local,
            change.snapshot,
        )

    def _commit(self) -> None:
        now = time.monotonic()
        if self.conn is not None and now - self.last_prune >= PRUNE_EVERY_S:
            self._prune()
            self.last_prune = now
        super()._commit()

    def _prune(self) -> None:
        """Tombstones past the window, conflict records past the number kept: in the
        transaction being committed."""
        assert self.conn is not None
        window_us = int(self.feed.config.active_active_tombstone_window_s * 1e6)
        cutoff = int(time.time() * 1e6) - window_us
        try:
            self.conn.execute(sql.prune_tombstones(self.schema), {"cutoff": cutoff})
            self.conn.execute(
                sql.prune_conflicts(self.schema),
                {"feed": self.feed.name, "kept": self.feed.config.active_active_conflicts_kept},
            )
        except LOST:
            raise
        except psycopg.Error as err:
            raise Refused(f"the database refused pruning: {err}") from err

    def status(self) -> dict[str, Any]:
        found = super().status()
        found["conflicts"] = dict(self.conflicts)
        found["side"] = f"{self.side} -> {self.local}"
        return found


def _json(values: Mapping[str, Any], kinds: dict[str, str]) -> str:
    """Column values as the JSON the apply function reads with jsonb_populate_record:
    each in the text form its column type takes (a jsonb column's value as JSON)."""
    out = {}
    for column, value in values.items():
        out[column] = _json_value(value, kinds.get(column, ""))
    return orjson.dumps(out).decode()


def _json_value(value: Any, kind: str) -> Any:
    if value is None or isinstance(value, bool | int | str):
        if kind == "jsonb" and isinstance(value, str):
            return orjson.Fragment(value)
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)  # nan, inf: float8 reads them
    if isinstance(value, bytes | bytearray | memoryview):
        return "\\x" + bytes(value).hex()
    if isinstance(value, Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    return str(value)
