"""The PostgreSQL sink of one direction of an active-active pair (docs/active-active.md).

Both databases take application writes; each direction's sink applies the other side's
Debezium changes into the application's own tables, last writer wins on source commit
times (the rule: crossfeed/core/lww.py; the SQL: crossfeed/pair/sql.py). Everything else
is the ordinary
PostgreSQL sink's: whole source transactions, the position row in the same database
transaction, the advisory lock, reconnects, dead letters.

What differs:

* the session says it is crossfeed's (``crossfeed.applying``: the pair's triggers leave the
  hidden columns and tombstones to it) and writes under the replication origin
  ``crossfeed:<feed>``, so that the other direction's Debezium reader drops what it writes:
  nothing is sent back;
* changes are never merged (a counter needs every difference, and every lost change is
  recorded): a batch reads what its keys hold, one statement per table with the rows
  locked, resolves each key's changes in commit order, and writes the outcome with one
  statement per kind (rows, counters, deletes, tombstones, conflicts);
* tables are the application's: they are never created here, only given the hidden
  columns and triggers when first seen (``crossfeed pair create`` does it beforehand);
* conflicts are counted (``crossfeed_sink_conflicts_total``) and the newest
  ``active_active.conflicts_kept`` of them kept in ``crossfeed_conflicts``; tombstones are
  kept ``active_active.tombstone_window_s``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import psycopg

from crossfeed.core import lww
from crossfeed.core.columns import HIDDEN_COLUMNS
from crossfeed.pair import catalog, sql
from crossfeed.services.sink import metrics
from crossfeed.services.sink.postgres import mapping
from crossfeed.services.sink.postgres.batch import Batch
from crossfeed.services.sink.postgres.debezium import DebeziumMounter
from crossfeed.services.sink.postgres.mapping import Misfit, RowChange
from crossfeed.services.sink.postgres.position import Fenced
from crossfeed.services.sink.postgres.sink import PostgresSink
from crossfeed.services.sink.postgres.writer import LOST, Refused
from crossfeed.services.sink.schemas import reference

log = logging.getLogger(__name__)

PRUNE_EVERY_S = 60.0
NOT_REPLICATED = HIDDEN_COLUMNS
RACE_RETRIES = 5


class _Raced(Exception):
    """A row was inserted on this side between the batch's read and its write."""


class Replicated(RowChange):
    """A row change with what last writer wins needs: the source's commit time, whether
    it is a snapshot row, and each counter column's difference."""

    __slots__ = ("deltas", "side", "snapshot", "source_us")

    source_us: int
    side: str  # the side that wrote it
    snapshot: bool
    deltas: dict[str, Any] | None


class InOrder(Batch):
    """Every change, in order, none merged (last writer wins resolves each one)."""

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


class ReplicatedDecoder:
    """The pair's Debezium envelopes (decoders.py): row changes of the application's
    columns, with the side, the source time and the counters' deltas they carry."""

    def __init__(
        self, mounter: DebeziumMounter, counters: dict[str, frozenset[str]], side: str
    ) -> None:
        self.mounter, self.counters, self.side = mounter, counters, side

    def decode(
        self, key: bytes | None, value: bytes | None, commit_ts: int, hdrs: list[Any] | None
    ) -> Replicated | None:
        sid = reference(value, hdrs)
        written = self.mounter.mount_written(key, value, commit_ts, sid, self.counters)
        if written is None:
            return None
        change = written.change
        table_counters = self.counters.get(change.table, frozenset())
        # crossfeed's own columns on the source are not the application's: the pair's
        # (this side sets its own) and a one-way feed's hidden commit_ts (a table a CDC
        # feed wrote before the pair was made has it, NOT NULL on that side only)
        values = {c: v for c, v in change.values.items() if c not in NOT_REPLICATED}
        columns = tuple(c for c in change.columns if c.name not in NOT_REPLICATED)
        replicated = Replicated(
            change.table,
            change.op,
            change.key,
            values,
            change.commit_ts,
            columns,
            change.ddl,
            change.schema_version,
        )
        replicated.source_us = written.source_us
        replicated.side = self.side
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
        self.unsafe: dict[str, str] = {}  # tables the pair's checks refuse: why
        self.local_name = self.local.encode()
        self.conflicts = {lww.WON: 0, lww.LOST: 0}
        self.last_prune = 0.0
        # a pair's feed is a Debezium one (feeds.py): its changes carry more than rows
        self.decoder = ReplicatedDecoder(self._debezium_mounter(), self.counters, self.side)

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

    def _fit(self, change: RowChange) -> None:
        """An application's table: never created here; given the hidden columns and
        triggers when first seen; new columns added as the ordinary sink does."""
        if change.table in self.unsafe:
            raise Misfit("UnsafeTable", self.unsafe[change.table])
        if change.table not in self.ready:
            existing = self._table(change.table)
            if existing is None:
                raise Misfit(
                    "UnknownTable",
                    f"table {self.schema}.{change.table} does not exist: an active-active "
                    "pair applies into tables that exist on both sides (create it there too)",
                )
            assert self.conn is not None
            self._check_table(change.table)
            name = mapping.qualified(self.schema, change.table)
            found = self.conn.execute(sql.table_ready_query(), {"t": name}).fetchone()
            if found is None or tuple(found) != (2, 2):
                self._spill_open()  # DDL is a barrier
                for statement in sql.table_ddl(self.schema, change.table, existing.primary_key):
                    log.info("feed %s: %s", self.feed.name, statement)
                    self._execute(statement)
                self._forget_tables()
            self.ready.add(change.table)
        self._fit_columns(change, commit_ts_column=False)

    def _check_table(self, table: str) -> None:
        """What pair create checks, for a table first seen here (the schema may have
        changed since): a refusal makes its changes dead letters, a warning is logged."""
        assert self.conn is not None
        counters = self.counters.get(table, frozenset())
        findings = catalog.table_findings(self.conn, self.local, self.schema, table, counters)
        for finding in findings:
            if finding.overridable:
                log.warning("feed %s: table %s: %s", self.feed.name, table, finding.line())
        refused = [f.line() for f in findings if not f.overridable]
        if refused:
            self.unsafe[table] = "; ".join(refused)
            log.error("feed %s: table %s refused: %s", self.feed.name, table, self.unsafe[table])
            raise Misfit("UnsafeTable", self.unsafe[table])

    def _forget_tables(self) -> None:
        super()._forget_tables()
        self.ready.clear()
        self.unsafe.clear()

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
        """Every change held, table by table: what the keys hold is read (rows locked),
        crossfeed/core/lww.py resolves each key's changes in order, and the outcome is
        written with one statement per kind."""
        if not len(batch):
            return
        assert self.conn is not None
        tables: dict[str, list[Replicated]] = {}
        for change in batch.all():
            assert isinstance(change, Replicated)
            tables.setdefault(change.table, []).append(change)
        try:
            with self.conn.cursor() as cur:
                for table, changes in tables.items():
                    self._write_table_surely(cur, table, changes)
        except LOST:
            raise
        except psycopg.Error as err:
            raise Refused(f"the database refused a write: {err}") from err
        batch.clear()

    def _write_table_surely(self, cur: Any, table: str, changes: list[Replicated]) -> None:
        """:meth:`_write_table`, again from what the keys then hold if an application
        inserted one of them between the read and the write (under a savepoint)."""
        for _ in range(RACE_RETRIES):
            cur.execute("SAVEPOINT cf_table")
            try:
                self._write_table(cur, table, changes)
            except _Raced:
                cur.execute("ROLLBACK TO SAVEPOINT cf_table")
                log.info("feed %s: table %s written meanwhile; again", self.feed.name, table)
                continue
            cur.execute("RELEASE SAVEPOINT cf_table")
            return
        raise Refused(f"table {table}: rows written on this side meanwhile, {RACE_RETRIES} times")

    def _write_table(self, cur: Any, table: str, changes: list[Replicated]) -> None:
        kinds = {c.name: c.type for change in changes for c in change.columns}
        keys = list(changes[0].key_columns)
        key_types = [mapping.PG_TYPES[kinds[k]] for k in keys]
        by_key: dict[tuple[Any, ...], list[Replicated]] = {}
        for change in changes:
            by_key.setdefault(change.key, []).append(change)
        order = list(by_key)
        key_arrays = [list(column) for column in zip(*order, strict=True)]
        counters = sorted(self.counters.get(table, frozenset()) & set(kinds))
        held: dict[int, tuple[lww.Stamp, dict[str, Any]]] = {}
        cur.execute(
            sql.read_rows(self.schema, table, keys, key_types, counters), [self.local, *key_arrays]
        )
        for ordinal, ts, side, *values in cur.fetchall():
            typed = {c: _typed(v, kinds[c]) for c, v in zip(counters, values, strict=True)}
            held[ordinal - 1] = ((ts, side.encode()), typed)
        tombs: dict[int, lww.Stamp] = {}
        cur.execute(
            sql.read_tombstones(self.schema, keys, key_types), [self.local, *key_arrays, table]
        )
        for ordinal, ts, side in cur.fetchall():
            tombs[ordinal - 1] = (ts, side.encode())
        plan = _Plan(keys, counters)
        columns = frozenset(counters)
        for i, key in enumerate(order):
            row, values = held.get(i, (None, {}))
            result = lww.resolve(
                lww.Held(row, values, tombs.get(i)),
                [_lww_change(c) for c in by_key[key]],
                self.local_name,
                columns,
            )
            plan.add(key, result, by_key[key])
        self._run_plan(cur, table, plan, kinds, key_types)

    def _run_plan(
        self, cur: Any, table: str, plan: _Plan, kinds: dict[str, str], key_types: list[str]
    ) -> None:
        keys = plan.keys
        if plan.deletes:
            arrays = [list(c) for c in zip(*plan.deletes, strict=True)]
            cur.execute(sql.delete_rows(self.schema, table, keys, key_types), arrays)
        for shape, rows in plan.upserts.items():
            types = [kinds[c] for c in shape]
            for i, column in enumerate(shape):
                if column in plan.counters:
                    for row in rows:
                        row[0][i] = _typed(row[0][i], kinds[column])
            arrays = mapping.column_arrays([r[0] for r in rows], types, [r[1] for r in rows])
            arrays.append([r[2] for r in rows])
            statement = sql.upsert_rows(
                self.schema, table, list(shape), [mapping.PG_TYPES[t] for t in types], keys
            )
            cur.execute(statement, [*arrays, self.local])
            if cur.rowcount != len(rows):
                # an application inserted one of these keys after the batch read them (and
                # won): resolve again from what the keys hold now
                raise _Raced(table)
        if plan.counted:
            counter_types = [mapping.PG_TYPES[kinds[c]] for c in plan.counters]
            arrays = [list(c) for c in zip(*(r[0] for r in plan.counted), strict=True)]
            for column in plan.counters:
                arrays.append([_typed(r[1][column], kinds[column]) for r in plan.counted])
            arrays.append([r[2] for r in plan.counted])
            arrays.append([r[3] for r in plan.counted])
            statement = sql.set_counters(
                self.schema, table, keys, key_types, plan.counters, counter_types
            )
            cur.execute(statement, arrays)
        if plan.tombs:
            arrays = [list(c) for c in zip(*(r[0] for r in plan.tombs), strict=True)]
            arrays += [[r[1] for r in plan.tombs], [r[2] for r in plan.tombs]]
            statement = sql.write_tombstones(self.schema, keys, key_types)
            cur.execute(statement, [table, *arrays, self.local])
        if plan.lost:
            arrays = [list(c) for c in zip(*(r[0] for r in plan.lost), strict=True)]
            arrays += [list(c) for c in zip(*(r[1:] for r in plan.lost), strict=True)]
            statement = sql.record_conflicts(self.schema, keys, key_types)
            cur.execute(statement, [self.feed.name, table, *arrays])
        for outcome, count in plan.outcomes.items():
            if outcome == lww.LOST:
                self.skipped[table] = self.skipped.get(table, 0) + count
            if outcome in self.conflicts:
                self.conflicts[outcome] += count
                metrics.CONFLICTS.labels(self.feed.name, outcome).inc(count)

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


class _Plan:
    """What a batch does to one table, gathered key by key from lww.resolve."""

    def __init__(self, keys: list[str], counters: list[str]) -> None:
        self.keys, self.counters = keys, counters
        self.deletes: list[tuple[Any, ...]] = []
        # columns -> (values in that order, time, side) per row
        self.upserts: dict[tuple[str, ...], list[tuple[list[Any], int, str]]] = {}
        self.counted: list[tuple[tuple[Any, ...], dict[str, Any], int, str]] = []
        self.tombs: list[tuple[tuple[Any, ...], int, str]] = []
        # key, op, lost time, lost side, winning time, winning side, what won
        self.lost: list[tuple[tuple[Any, ...], str, int, str, int, str, str]] = []
        self.outcomes: dict[str, int] = {}

    def add(self, key: tuple[Any, ...], result: lww.Result, changes: list[Replicated]) -> None:
        if result.delete:
            self.deletes.append(key)
        if result.values is not None:
            assert result.stamp is not None
            row = dict(result.values)
            self.upserts.setdefault(tuple(row), []).append(
                (list(row.values()), result.stamp[0], result.stamp[1].decode())
            )
        elif result.counters is not None:
            assert result.stamp is not None
            self.counted.append((key, result.counters, result.stamp[0], result.stamp[1].decode()))
        if result.tomb is not None:
            self.tombs.append((key, result.tomb[0], result.tomb[1].decode()))
        for change, verdict in zip(changes, result.verdicts, strict=True):
            self.outcomes[verdict.outcome] = self.outcomes.get(verdict.outcome, 0) + 1
            if verdict.outcome == lww.LOST:
                assert verdict.winner is not None
                stamp = _stamp(change)
                self.lost.append(
                    (
                        key,
                        change.op,
                        stamp[0],
                        change.side,
                        verdict.winner[0],
                        verdict.winner[1].decode(),
                        verdict.by,
                    )
                )


def _stamp(change: Replicated) -> lww.Stamp:
    """A snapshot row's time is 0: it is older than every write (it only fills in)."""
    return (0 if change.snapshot else change.source_us, change.side.encode())


def _lww_change(change: Replicated) -> lww.Change:
    values = change.values if change.op == "upsert" else {}
    deltas = change.deltas or {}
    only = bool(deltas) and all(c in deltas or c in change.key_columns for c in values)
    return lww.Change(change.op, _stamp(change), values, change.deltas, change.snapshot, only)


def _typed(value: Any, kind: str) -> Any:
    """A counter's value as its column's Python type (a list psycopg sends is one type)."""
    if value is None:
        return None
    if kind == "numeric":
        return Decimal(value)
    if kind in ("double", "float"):
        return float(value)
    return int(value)
