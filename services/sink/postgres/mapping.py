"""The PostgreSQL sink's pure parts: ChangeEvent -> row change (the mounter), Avro -> PG
types, does a change fit its table, and the SQL. No I/O here.

A row change keeps its source transaction's commit_ts; every table the sink writes has a
hidden column ``_crossfeed_commit_ts`` holding the commit_ts of the change that last wrote
the row. An upsert or delete only touches a row whose stored commit_ts is at or below its
own (last writer wins: an older change is skipped and counted), so a change from another
writer (active-active) that is newer is never overwritten by an older one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from crossfeed.core.columns import COMMIT_TS_COLUMN as COMMIT_TS_COLUMN

POSITION_TABLE: Final = "crossfeed_position"
SYNCPOINT_TABLE: Final = "crossfeed_syncpoint"

PG_TYPES: Final[Mapping[str, str]] = {
    "boolean": "boolean",
    "long": "bigint",
    "double": "double precision",
    "string": "text",
    "bytes": "bytea",
    # Debezium input (debezium.py): the Connect types crossfeed's ChangeEvent does not have.
    "int16": "smallint",
    "int32": "integer",
    "float": "real",
    "numeric": "numeric",
    "date": "date",
    "time": "time without time zone",
    "timestamp": "timestamp without time zone",
    "timestamptz": "timestamp with time zone",
    "uuid": "uuid",
    "jsonb": "jsonb",
}
"""Column type -> PostgreSQL type (as format_type names it): ChangeEvent's Avro types, then
those of Debezium input."""


class Misfit(ValueError):
    """A change that does not fit (its table, or the ChangeEvent contract): it goes to
    the dead-letter topic with ``error_class`` and the message as the reason."""

    def __init__(self, error_class: str, reason: str) -> None:
        super().__init__(reason)
        self.error_class = error_class


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type: str  # a ChangeEvent ColumnType
    primary_key: bool = False
    nullable: bool = True

    @property
    def pg_type(self) -> str:
        return PG_TYPES[self.type]


@dataclass(slots=True)
class RowChange:
    """One decoded change. ``op`` is upsert (insert/update), delete or ddl. Never changed
    once made; not a frozen dataclass only because a frozen one's __init__ costs ~1 µs
    (object.__setattr__ per field), made once per row change."""

    table: str
    op: str  # upsert, delete, ddl, or truncate (Debezium input: every row at or below it)
    key: tuple[Any, ...]  # primary-key values, in key order
    values: Mapping[str, Any]  # upsert: column -> value (key columns included)
    commit_ts: int
    columns: tuple[Column, ...]
    ddl: str | None = None
    schema_version: int = 0
    _shape: tuple[str, tuple[str, ...]] | None = field(
        default=None, init=False, compare=False, repr=False
    )

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.primary_key)

    @property
    def shape(self) -> tuple[str, tuple[str, ...]]:
        """What statement writes it: the op and the columns it sets (asked several
        times per change: made once)."""
        if self._shape is None:
            self._shape = (self.op, tuple(self.values) if self.op == "upsert" else ())
        return self._shape


def _python_value(value: Any) -> Any:
    if isinstance(value, dict):  # Binary
        return value["data"]
    return value


def _fits(column: Column, value: Any) -> bool:
    if value is None:
        return True
    kind = column.type
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "long":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "double":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return isinstance(value, bytes)


def _type_name(value: Any) -> str:
    return {bool: "boolean", int: "long", float: "double", str: "string", bytes: "bytes"}.get(
        type(value), type(value).__name__
    )


@dataclass(frozen=True, slots=True)
class _Columns:
    raw: list[Any]  # as decoded: compared to tell a cache hit
    columns: tuple[Column, ...]
    by_name: Mapping[str, Column]
    key: tuple[Column, ...]


class Mounter:
    """ChangeEvent -> RowChange. Remembers each table's column list per schema_version
    (the same for every change written with it; checked by comparing the decoded lists,
    which is far cheaper than building the columns again)."""

    def __init__(self) -> None:
        self._columns: dict[tuple[str, int], _Columns] = {}

    def columns(self, table: str, version: int, raw: list[Any]) -> _Columns:
        hit = self._columns.get((table, version))
        if hit is not None and hit.raw == raw:
            return hit
        columns = tuple(
            Column(c["name"], c["type"], c.get("primary_key", False), c.get("nullable", True))
            for c in raw
        )
        made = _Columns(
            raw,
            columns,
            {c.name: c for c in columns},
            tuple(c for c in columns if c.primary_key),
        )
        if len(self._columns) > 10_000:
            self._columns.clear()
        self._columns[(table, version)] = made
        return made

    def mount(self, event: Mapping[str, Any], commit_ts: int) -> RowChange:
        return mount(event, commit_ts, self)


def mount(event: Mapping[str, Any], commit_ts: int, mounter: Mounter | None = None) -> RowChange:
    """A decoded ChangeEvent as a row change; Misfit if it breaks its own schema."""
    table = event["table"]
    version = event["schema_version"]
    known = (mounter or Mounter()).columns(table, version, event["columns"])
    columns, by_name = known.columns, known.by_name
    if not table:
        raise Misfit("MissingTable", "the change names no table")
    op = event["op"]
    if op == "ddl":
        if not columns:
            raise Misfit("BadDdl", f"ddl change of table {table} lists no columns")
        return RowChange(table, "ddl", (), {}, commit_ts, columns, event.get("ddl"), version)
    key_columns = known.key
    if not key_columns:
        raise Misfit("MissingKey", f"table {table}: the change's columns have no primary key")
    raw_key = event.get("key") or {}
    key = []
    for column in key_columns:
        value = _python_value(raw_key.get(column.name))
        if value is None:
            raise Misfit(
                "MissingKey",
                f"table {table}: key column {column.name!r} has no value in the change's key",
            )
        if not _fits(column, value):
            raise Misfit(
                "TypeMismatch",
                f"table {table}: key column {column.name!r} is {column.type} but the key holds "
                f"a {_type_name(value)} ({value!r:.40})",
            )
        key.append(value)
    if op == "delete":
        return RowChange(table, "delete", tuple(key), {}, commit_ts, columns, None, version)
    after = event.get("after")
    if after is None:
        raise Misfit("MissingValues", f"table {table}: {op} change without 'after' values")
    values: dict[str, Any] = {}
    for name, raw in after.items():
        found = by_name.get(name)
        if found is None:
            raise Misfit(
                "UnknownColumn",
                f"table {table}: 'after' sets column {name!r}, which the change's columns "
                "do not list",
            )
        value = _python_value(raw)
        if not _fits(found, value):
            raise Misfit(
                "TypeMismatch",
                f"table {table}: column {name!r} is {found.type} but the change holds a "
                f"{_type_name(value)} ({value!r:.40})",
            )
        if value is None and (found.primary_key or not found.nullable):
            raise Misfit("NullValue", f"table {table}: column {name!r} may not be null")
        values[name] = value
    for column, value in zip(key_columns, key, strict=True):
        if values.setdefault(column.name, value) != value:
            raise Misfit(
                "KeyMismatch",
                f"table {table}: key column {column.name!r} is {value!r:.40} in the key but "
                f"{values[column.name]!r:.40} in 'after'",
            )
    return RowChange(table, "upsert", tuple(key), values, commit_ts, columns, None, version)


# -- the table as it is in the database ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableSchema:
    """A target table: column -> PostgreSQL type, and its primary key in order."""

    columns: Mapping[str, str]
    primary_key: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    """What the database needs before a change can be written (DDL, in order)."""

    create: bool = False
    add: tuple[Column, ...] = ()
    add_commit_ts: bool = False
    statements: tuple[str, ...] = field(default=())


def plan(
    schema_name: str,
    existing: TableSchema | None,
    change: RowChange,
    auto_create: bool,
    commit_ts_column: bool = True,
) -> Plan:
    """The DDL ``change`` needs on a table that looks like ``existing`` (None: absent);
    Misfit when it does not fit and may not be made to. ``commit_ts_column``: the table
    keeps the hidden commit_ts (an active-active pair's tables keep their own instead)."""
    table = change.table
    ddl = change.op == "ddl"
    if existing is None:
        if not (auto_create or ddl):
            raise Misfit(
                "UnknownTable",
                f"table {schema_name}.{table} does not exist and postgres.auto.create is false",
            )
        return Plan(create=True, statements=(create_table(schema_name, table, change.columns),))
    event_key = change.key_columns
    if event_key != existing.primary_key:
        raise Misfit(
            "KeyMismatch",
            f"table {schema_name}.{table} has primary key {list(existing.primary_key)} but "
            f"the change's is {list(event_key)}",
        )
    wanted = change.columns if ddl else [c for c in change.columns if c.name in change.values]
    missing = []
    for column in wanted:
        have = existing.columns.get(column.name)
        if have is None:
            missing.append(column)
        elif have.split("(", 1)[0] != column.pg_type:  # numeric(12,2) is a numeric
            raise Misfit(
                "TypeMismatch",
                f"column {schema_name}.{table}.{column.name} is {have} but the change's "
                f"{column.type} maps to {column.pg_type}",
            )
    if missing and not (auto_create or ddl):
        names = ", ".join(c.name for c in missing)
        raise Misfit(
            "UnknownColumn",
            f"table {schema_name}.{table} has no column {names} and postgres.auto.create is false",
        )
    add_commit_ts = commit_ts_column and COMMIT_TS_COLUMN not in existing.columns
    statements = [add_column(schema_name, table, c) for c in missing]
    if add_commit_ts:
        statements.append(add_commit_ts_column(schema_name, table))
    return Plan(add=tuple(missing), add_commit_ts=add_commit_ts, statements=tuple(statements))


# -- SQL ------------------------------------------------------------------------------------


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    if "\x00" in name:
        raise Misfit("BadName", f"name {name!r} holds a NUL character")
    return '"' + name.replace('"', '""') + '"'


def qualified(schema_name: str, table: str) -> str:
    return f"{ident(schema_name)}.{ident(table)}"


def create_table(schema_name: str, table: str, columns: Sequence[Column]) -> str:
    parts = [
        f"{ident(c.name)} {c.pg_type}{' NOT NULL' if c.primary_key or not c.nullable else ''}"
        for c in columns
    ]
    parts.append(f"{ident(COMMIT_TS_COLUMN)} bigint NOT NULL DEFAULT 0")
    key = ", ".join(ident(c.name) for c in columns if c.primary_key)
    if key:
        parts.append(f"PRIMARY KEY ({key})")
    return f"CREATE TABLE IF NOT EXISTS {qualified(schema_name, table)} ({', '.join(parts)})"


def add_column(schema_name: str, table: str, column: Column) -> str:
    return (
        f"ALTER TABLE {qualified(schema_name, table)} "
        f"ADD COLUMN IF NOT EXISTS {ident(column.name)} {column.pg_type}"
    )


def add_commit_ts_column(schema_name: str, table: str) -> str:
    return (
        f"ALTER TABLE {qualified(schema_name, table)} "
        f"ADD COLUMN IF NOT EXISTS {ident(COMMIT_TS_COLUMN)} bigint NOT NULL DEFAULT 0"
    )


def upsert(schema_name: str, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
    """INSERT ... ON CONFLICT DO UPDATE, only over a row at or below the change's
    commit_ts (last writer wins); parameters: ``columns`` values then the commit_ts."""
    params = ", ".join(["%s"] * (len(columns) + 1))
    return _upsert(schema_name, table, columns, key, f"VALUES ({params})")


def _upsert(
    schema_name: str, table: str, columns: Sequence[str], key: Sequence[str], rows: str
) -> str:
    names = [*columns, COMMIT_TS_COLUMN]
    target = qualified(schema_name, table)
    cols = ", ".join(ident(n) for n in names)
    updates = ", ".join(f"{ident(n)} = EXCLUDED.{ident(n)}" for n in names if n not in key)
    ts = ident(COMMIT_TS_COLUMN)
    return (
        f"INSERT INTO {target} ({cols}) {rows} "
        f"ON CONFLICT ({', '.join(ident(k) for k in key)}) DO UPDATE SET {updates} "
        f"WHERE {target}.{ts} <= EXCLUDED.{ts}"
    )


def delete(schema_name: str, table: str, key: Sequence[str]) -> str:
    """DELETE by key, only a row at or below the change's commit_ts; parameters: the key
    values then the commit_ts."""
    where = " AND ".join(f"{ident(k)} = %s" for k in key)
    return (
        f"DELETE FROM {qualified(schema_name, table)} "
        f"WHERE {where} AND {ident(COMMIT_TS_COLUMN)} <= %s"
    )


def _arrays(types: Sequence[str]) -> str:
    # Binary parameters (%b): psycopg sends each list as a binary array, cheaper to make
    # and to read than text; the cast names the column's type (a list of small ints
    # goes as int2[], say).
    return ", ".join(f"%b::{PG_TYPES[t]}[]" for t in types)


def upsert_many(
    schema_name: str,
    table: str,
    columns: Sequence[str],
    types: Sequence[str],
    key: Sequence[str],
) -> str:
    """:func:`upsert` of many rows in one statement, each column's values an array
    (``types``: the columns' ChangeEvent types); parameters: :func:`column_arrays`. One
    statement instead of one per row: the server plans and runs it once (2.5x the rows/s
    of a pipelined executemany here, at a fifth of the client's CPU). The rows must have
    distinct keys (a Batch holds one change per row)."""
    rows = f"SELECT * FROM unnest({_arrays([*types, 'long'])})"
    return _upsert(schema_name, table, columns, key, rows)


def delete_many(schema_name: str, table: str, key: Sequence[str], types: Sequence[str]) -> str:
    """:func:`delete` of many rows in one statement; parameters: :func:`column_arrays`
    of the keys (``types``: the key columns' ChangeEvent types)."""
    names = ", ".join(f"k{i}" for i in range(len(key)))
    where = " AND ".join(f"_cf_t.{ident(k)} = _cf_d.k{i}" for i, k in enumerate(key))
    return (
        f"DELETE FROM {qualified(schema_name, table)} AS _cf_t "
        f"USING unnest({_arrays([*types, 'long'])}) AS _cf_d({names}, ts) "
        f"WHERE {where} AND _cf_t.{ident(COMMIT_TS_COLUMN)} <= _cf_d.ts"
    )


def column_arrays(
    rows: Sequence[Iterable[Any]], types: Sequence[str], commit_ts: Sequence[int]
) -> list[list[Any]]:
    """The parameters of :func:`upsert_many` / :func:`delete_many`: ``rows`` (each in
    the columns' order) turned into one list per column, then the commit_ts list. A
    double column's ints become floats (psycopg refuses a list of ints and floats mixed;
    the database would have made the same double of the int)."""
    arrays = [list(column) for column in zip(*rows, strict=True)] if rows else [[] for _ in types]
    for i, kind in enumerate(types):
        if kind in ("double", "float"):
            arrays[i] = [v if v is None or type(v) is float else float(v) for v in arrays[i]]
    arrays.append(list(commit_ts))
    return arrays


def truncate(schema_name: str, table: str) -> str:
    """A source TRUNCATE: every row at or below the change's commit_ts (last writer wins,
    as for a delete); parameter: the commit_ts."""
    return f"DELETE FROM {qualified(schema_name, table)} WHERE {ident(COMMIT_TS_COLUMN)} <= %s"


def bookkeeping_ddl(schema_name: str) -> list[str]:
    """The sink's own tables in the target schema: the applied position per feed (written
    in every transaction) and the syncpoints (TiCDC's)."""
    return [
        f"CREATE SCHEMA IF NOT EXISTS {ident(schema_name)}",
        f"CREATE TABLE IF NOT EXISTS {qualified(schema_name, POSITION_TABLE)} ("
        "feed text PRIMARY KEY, commit_ts bigint NOT NULL, txn text NOT NULL, "
        "checkpoint_ts bigint NOT NULL, sorted_offset bigint NOT NULL, "
        "updated_at timestamptz NOT NULL DEFAULT now())",
        f"CREATE TABLE IF NOT EXISTS {qualified(schema_name, SYNCPOINT_TABLE)} ("
        "feed text NOT NULL, consistency_ts bigint NOT NULL, "
        "target_ts timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (feed, consistency_ts))",
    ]
