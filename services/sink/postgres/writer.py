"""Writing rows to the PostgreSQL sink's target (sink.py): the batch of whole source
transactions and the open one's changes, their tables made to fit (DDL when needed), one
statement per table and shape with its rows as arrays, savepoints around what a cut short
source transaction takes back. PostgresSink (sink.py) decides when; this writes."""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from crossfeed.services.sink.base import OrderedSink
from crossfeed.services.sink.postgres import mapping, tables
from crossfeed.services.sink.postgres.batch import Batch
from crossfeed.services.sink.postgres.mapping import RowChange, TableSchema

log = logging.getLogger(__name__)

MAX_ROWS = 10_000  # rows held per buffer before they are written (bounded memory)
LOST = (psycopg.OperationalError, psycopg.InterfaceError)


class Refused(RuntimeError):
    """The database refused a write of the batch (not a lost connection)."""


class PostgresWriter(OrderedSink):
    """The writing half of PostgresSink: what it holds and how it reaches the database."""

    conn: psycopg.Connection[Any] | None
    schema: str
    auto_create: bool

    def _init_writer(self) -> None:
        self.done = Batch()  # whole source transactions not yet written
        # The open source transaction's changes not yet written, in order: a list, merged
        # into the batch (self.done) once the transaction is whole, or written under a
        # SAVEPOINT when MAX_ROWS of them are held (one batch operation per change).
        self.open: list[RowChange] = []
        self.tables: dict[str, TableSchema | None] = {}
        # (table, schema_version, shape) known to fit the table as cached in self.tables
        self.fitted: set[tuple[str, int, tuple[str, tuple[str, ...]]]] = set()
        self.sql: dict[tuple[str, tuple[str, tuple[str, ...]], tuple[str, ...]], str] = {}

    def _reset_txn(self) -> None:
        super()._reset_txn()
        self.savepoint = False  # the open source transaction has rows under a SAVEPOINT
        self.done.clear()
        self.open.clear()

    def _opened(self) -> None:
        self.savepoint = False

    def _cut_short(self) -> bool:
        self.open.clear()
        if self.savepoint:
            self._execute("ROLLBACK TO SAVEPOINT cf_txn")
            self._forget_tables()  # DDL may have been rolled back with it
            self.savepoint = False
        return True

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
        self._fit_columns(change, commit_ts_column=True)

    def _fit_columns(self, change: RowChange, commit_ts_column: bool) -> None:
        """``change``'s columns on its table (and the hidden commit_ts column when
        ``commit_ts_column``), adding what is missing when allowed, else Misfit."""
        known = (change.table, change.schema_version, change.shape)
        if change.op != "ddl" and known in self.fitted:
            return
        existing = self._table(change.table)
        plan = mapping.plan(
            self.schema, existing, change, self.auto_create, commit_ts_column=commit_ts_column
        )
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
        schema = tables.read_table(self.conn, mapping.qualified(self.schema, table))
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
