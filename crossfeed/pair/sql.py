"""The SQL an active-active pair needs in each of its two databases (docs/active-active.md).
No I/O: statements as text, run by ``crossfeed pair create`` and by the sink.

Last writer wins on the **source commit time** of each row's last write, the same on both
sides:

* a row an application wrote has the commit time of its transaction:
  ``pg_xact_commit_timestamp(xmin)`` (``track_commit_timestamp=on``). A trigger clears the
  hidden columns on every application write, so they say "look at xmin";
* a row crossfeed's sink wrote holds the source transaction's commit time (Debezium's
  ``source.ts_us``, the same microseconds as ``pg_xact_commit_timestamp`` on the source)
  and the source side's name in the hidden columns ``_crossfeed_ts`` and ``_crossfeed_side``.

A change is applied only if ``(time, side)`` is greater than the row's: equal times go to
the greater side name, compared byte for byte (``COLLATE "C"``), so both sides pick the same
winner. Deletes leave a tombstone (``crossfeed_tombstones``: an application's delete by
trigger, a replicated one by the sink), so an older update arriving later cannot bring the
row back. A change that loses is skipped and recorded in ``crossfeed_conflicts``. A counter
column takes the difference its source transaction made (``local + (new - old)``), win or
lose, so concurrent changes on both sides all count.

The rule itself is crossfeed/core/lww.py; the sink reads what a batch's keys hold with
:func:`read_rows` and :func:`read_tombstones` (locking the rows), resolves them, and writes
the outcome with one statement per kind (:func:`upsert_rows`, :func:`set_counters`,
:func:`delete_rows`, :func:`write_tombstones`, :func:`record_conflicts`), each taking
one array per column (``%b::type[]``, as the ordinary sink's statements). Its session sets
``crossfeed.applying`` (the triggers then leave the hidden columns and tombstones to it) and
a replication origin named :func:`origin` (every change it writes is then marked in the
logical decoding stream, and the other direction's Debezium reader drops it: nothing is sent
back).
"""

from __future__ import annotations

from typing import Final

from crossfeed.core.columns import SIDE_COLUMN, TS_COLUMN
from crossfeed.wire.debezium import ORIGIN_PREFIX

TOMBSTONES: Final = "crossfeed_tombstones"
CONFLICTS: Final = "crossfeed_conflicts"
APPLYING_SETTING: Final = "crossfeed.applying"
STAMP_TRIGGER: Final = "crossfeed_stamp"
TOMBSTONE_TRIGGER: Final = "crossfeed_tombstone"


def origin(feed: str) -> str:
    """The replication origin the sink of ``feed`` writes under."""
    return ORIGIN_PREFIX + feed


def ident(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    """A quoted SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def qualified(schema: str, name: str) -> str:
    return f"{ident(schema)}.{ident(name)}"


def schema_ddl(schema: str) -> list[str]:
    """The pair's tables and functions in ``schema`` (idempotent)."""
    s = ident(schema)
    tombstones = qualified(schema, TOMBSTONES)
    conflicts = qualified(schema, CONFLICTS)
    return [
        f"CREATE SCHEMA IF NOT EXISTS {s}",
        f"CREATE TABLE IF NOT EXISTS {tombstones} ("
        "tbl text NOT NULL, key jsonb NOT NULL, "
        # NULL ts/side: this side's own delete, its time is the commit time of xmin
        "ts bigint, side text, PRIMARY KEY (tbl, key))",
        f"CREATE TABLE IF NOT EXISTS {conflicts} ("
        "id bigserial PRIMARY KEY, feed text NOT NULL, tbl text NOT NULL, key jsonb NOT NULL, "
        "op text NOT NULL, lost_ts bigint NOT NULL, lost_side text NOT NULL, "
        "won_ts bigint NOT NULL, won_side text NOT NULL, won_by text NOT NULL, "
        "at timestamptz NOT NULL DEFAULT now())",
        f"CREATE INDEX IF NOT EXISTS crossfeed_conflicts_feed ON {conflicts} (feed, id)",
        # The commit time of a transaction in microseconds; 0 when unknown (frozen, or
        # committed before track_commit_timestamp was on): older than any change.
        f"CREATE OR REPLACE FUNCTION {s}.crossfeed_commit_us(x xid) RETURNS bigint "
        "LANGUAGE sql STABLE AS $$ SELECT coalesce("
        "(extract(epoch FROM pg_xact_commit_timestamp(x)) * 1000000)::bigint, 0) $$",
        _STAMP_FUNCTION.replace("@S", s),
        _TOMBSTONE_FUNCTION.replace("@S", s),
    ]


def table_ddl(schema: str, table: str, key_columns: tuple[str, ...] | list[str]) -> list[str]:
    """The hidden columns and triggers of one replicated table (idempotent)."""
    target = qualified(schema, table)
    s = ident(schema)
    keys = ", ".join(literal(k) for k in key_columns)
    return [
        f"ALTER TABLE {target} ADD COLUMN IF NOT EXISTS {ident(TS_COLUMN)} bigint",
        f"ALTER TABLE {target} ADD COLUMN IF NOT EXISTS {ident(SIDE_COLUMN)} text",
        f"CREATE OR REPLACE TRIGGER {STAMP_TRIGGER} BEFORE INSERT OR UPDATE ON {target} "
        f"FOR EACH ROW EXECUTE FUNCTION {s}.crossfeed_stamp()",
        f"CREATE OR REPLACE TRIGGER {TOMBSTONE_TRIGGER} AFTER DELETE ON {target} "
        f"FOR EACH ROW EXECUTE FUNCTION {s}.crossfeed_tombstone({keys})",
    ]


def remove_ddl(schema: str, table: str) -> list[str]:
    """What :func:`table_ddl` added to a table, taken away (``pair remove --drop-hidden``)."""
    target = qualified(schema, table)
    return [
        f"DROP TRIGGER IF EXISTS {STAMP_TRIGGER} ON {target}",
        f"DROP TRIGGER IF EXISTS {TOMBSTONE_TRIGGER} ON {target}",
        f"ALTER TABLE {target} DROP COLUMN IF EXISTS {ident(TS_COLUMN)}",
        f"ALTER TABLE {target} DROP COLUMN IF EXISTS {ident(SIDE_COLUMN)}",
    ]


def table_ready_query() -> str:
    """Does a table have the hidden columns and both triggers? Parameter: its regclass
    name; one row: (columns found, triggers found)."""
    return (
        "SELECT (SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass(%(t)s) "
        f"AND attname IN ({literal(TS_COLUMN)}, {literal(SIDE_COLUMN)}) AND NOT attisdropped), "
        "(SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(%(t)s) "
        f"AND tgname IN ({literal(STAMP_TRIGGER)}, {literal(TOMBSTONE_TRIGGER)}))"
    )


def truncate(schema: str, table: str) -> str:
    """A replicated TRUNCATE: every row older than it (last writer wins, as a delete);
    parameters: the source commit µs, the source side, this side."""
    return (
        f"DELETE FROM {qualified(schema, table)} t WHERE "
        f"(coalesce(t.{ident(TS_COLUMN)}, {ident(schema)}.crossfeed_commit_us(t.xmin)), "
        f'coalesce(t.{ident(SIDE_COLUMN)}, %(local)s) COLLATE "C") '
        '< (%(ts)s::bigint, %(side)s::text COLLATE "C")'
    )


def prune_tombstones(schema: str) -> str:
    """Tombstones older than the window; parameter ``cutoff``: µs since the epoch."""
    return (
        f"DELETE FROM {qualified(schema, TOMBSTONES)} "
        f"WHERE coalesce(ts, {ident(schema)}.crossfeed_commit_us(xmin)) < %(cutoff)s"
    )


def prune_conflicts(schema: str) -> str:
    """All but the newest ``kept`` conflict records of ``feed``."""
    conflicts = qualified(schema, CONFLICTS)
    return (
        f"DELETE FROM {conflicts} WHERE feed = %(feed)s AND id <= "
        f"(SELECT id FROM {conflicts} WHERE feed = %(feed)s ORDER BY id DESC "
        "OFFSET %(kept)s LIMIT 1)"
    )


# An application's write: the hidden columns say "the time of xmin, this side".
_STAMP_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION @S.crossfeed_stamp() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF current_setting('crossfeed.applying', true) = 'on' THEN
        RETURN NEW;
    END IF;
    NEW._crossfeed_ts := NULL;
    NEW._crossfeed_side := NULL;
    RETURN NEW;
END
$fn$"""

# An application's delete leaves a tombstone whose time is its own transaction's (xmin of
# the tombstone row). Trigger arguments: the key columns.
_TOMBSTONE_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION @S.crossfeed_tombstone() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
    IF current_setting('crossfeed.applying', true) = 'on' THEN
        RETURN OLD;
    END IF;
    INSERT INTO @S.crossfeed_tombstones AS d (tbl, key, ts, side)
    SELECT TG_TABLE_NAME, jsonb_object_agg(k, to_jsonb(OLD) -> k), NULL, NULL
    FROM unnest(TG_ARGV) AS k
    ON CONFLICT (tbl, key) DO UPDATE SET ts = NULL, side = NULL;
    RETURN OLD;
END
$fn$"""


# -- a batch, set-based (parameters: one binary array per column, then what each says) --


def _arrays(types: list[str] | tuple[str, ...]) -> str:
    return ", ".join(f"%b::{t}[]" for t in types)


def _names(prefix: str, count: int) -> str:
    return ", ".join(f"{prefix}{i}" for i in range(count))


def _key_match(alias: str, keys: list[str] | tuple[str, ...], other: str) -> str:
    return " AND ".join(f"{alias}.{ident(k)} = {other}.k{i}" for i, k in enumerate(keys))


def _key_json(keys: list[str] | tuple[str, ...], alias: str) -> str:
    """The key as the delete trigger writes it (to_jsonb of each typed value)."""
    pairs = ", ".join(f"{literal(k)}, {alias}.k{i}" for i, k in enumerate(keys))
    return f"jsonb_build_object({pairs})"


def _row_stamp(alias: str, schema: str, local_param: str = "%s") -> str:
    return (
        f"coalesce({alias}.{ident(TS_COLUMN)}, {ident(schema)}.crossfeed_commit_us({alias}.xmin)), "
        f"coalesce({alias}.{ident(SIDE_COLUMN)}, {local_param})"
    )


def read_rows(
    schema: str, table: str, keys: list[str], key_types: list[str], counters: list[str]
) -> str:
    """The rows of a batch's keys, locked in key order (as applications that lock several
    rows mostly do: fewer deadlocks with them): (ordinal, time, side, counters...);
    parameters: this side's name, then the key arrays."""
    extra = "".join(f", t.{ident(c)}" for c in counters)
    order = ", ".join(f"t.{ident(k)}" for k in keys)
    return (
        f"SELECT k.ord, {_row_stamp('t', schema)}{extra} "
        f"FROM unnest({_arrays(key_types)}) WITH ORDINALITY AS k({_names('k', len(keys))}, ord) "
        f"JOIN {qualified(schema, table)} t ON {_key_match('t', keys, 'k')} "
        f"ORDER BY {order} FOR UPDATE OF t"
    )


def read_tombstones(schema: str, keys: list[str], key_types: list[str]) -> str:
    """The tombstones of a batch's keys: (ordinal, time, side); parameters: this side's
    name, the key arrays, the table."""
    return (
        f"SELECT k.ord, coalesce(d.ts, {ident(schema)}.crossfeed_commit_us(d.xmin)), "
        "coalesce(d.side, %s) "
        f"FROM unnest({_arrays(key_types)}) WITH ORDINALITY AS k({_names('k', len(keys))}, ord) "
        f"JOIN {qualified(schema, TOMBSTONES)} d ON d.tbl = %s AND d.key = {_key_json(keys, 'k')}"
    )


def delete_rows(schema: str, table: str, keys: list[str], key_types: list[str]) -> str:
    """Parameters: the key arrays."""
    return (
        f"DELETE FROM {qualified(schema, table)} t "
        f"USING unnest({_arrays(key_types)}) AS k({_names('k', len(keys))}) "
        f"WHERE {_key_match('t', keys, 'k')}"
    )


def upsert_rows(
    schema: str, table: str, columns: list[str], types: list[str], keys: list[str]
) -> str:
    """Whole rows with their last write's time and side, over a row only if it is older
    (a row an application inserted since the batch read its keys); parameters: the column
    arrays, the times, the sides, then this side's name. Returns one row per row written."""
    target = qualified(schema, table)
    names = [*columns, TS_COLUMN, SIDE_COLUMN]
    cols = ", ".join(ident(n) for n in names)
    updates = ", ".join(f"{ident(n)} = excluded.{ident(n)}" for n in names if n not in keys)
    return (
        f"INSERT INTO {target} AS t ({cols}) "
        f"SELECT * FROM unnest({_arrays([*types, 'bigint', 'text'])}) "
        f"ON CONFLICT ({', '.join(ident(k) for k in keys)}) DO UPDATE SET {updates} "
        f'WHERE ({_row_stamp("t", schema)} COLLATE "C") '
        f'< (excluded.{ident(TS_COLUMN)}, excluded.{ident(SIDE_COLUMN)} COLLATE "C") '
        "RETURNING 1"
    )


def set_counters(
    schema: str,
    table: str,
    keys: list[str],
    key_types: list[str],
    counters: list[str],
    counter_types: list[str],
) -> str:
    """Counters of rows that otherwise stay, with the row's own last write kept;
    parameters: the key arrays, the counter arrays, the times, the sides."""
    n = len(keys)
    sets = ", ".join(f"{ident(c)} = u.c{i}" for i, c in enumerate(counters))
    return (
        f"UPDATE {qualified(schema, table)} t SET {sets}, "
        f"{ident(TS_COLUMN)} = u.ts, {ident(SIDE_COLUMN)} = u.side "
        f"FROM unnest({_arrays([*key_types, *counter_types, 'bigint', 'text'])}) "
        f"AS u({_names('k', n)}, {_names('c', len(counters))}, ts, side) "
        f"WHERE {_key_match('t', keys, 'u')}"
    )


def write_tombstones(schema: str, keys: list[str], key_types: list[str]) -> str:
    """Tombstones newer than the key's; parameters: the table, the key arrays, the times,
    the sides, then this side's name."""
    tombstones = qualified(schema, TOMBSTONES)
    return (
        f"INSERT INTO {tombstones} AS d (tbl, key, ts, side) "
        f"SELECT %s, {_key_json(keys, 'u')}, u.ts, u.side "
        f"FROM unnest({_arrays([*key_types, 'bigint', 'text'])}) "
        f"AS u({_names('k', len(keys))}, ts, side) "
        "ON CONFLICT (tbl, key) DO UPDATE SET ts = excluded.ts, side = excluded.side "
        f"WHERE (coalesce(d.ts, {ident(schema)}.crossfeed_commit_us(d.xmin)), "
        'coalesce(d.side, %s) COLLATE "C") < (excluded.ts, excluded.side COLLATE "C")'
    )


def record_conflicts(schema: str, keys: list[str], key_types: list[str]) -> str:
    """Changes that lost; parameters: the feed, the table, the key arrays, then arrays of
    op, lost time, lost side, winning time, winning side and what won (row or delete)."""
    arrays = _arrays([*key_types, "text", "bigint", "text", "bigint", "text", "text"])
    return (
        f"INSERT INTO {qualified(schema, CONFLICTS)} "
        "(feed, tbl, key, op, lost_ts, lost_side, won_ts, won_side, won_by) "
        f"SELECT %s, %s, {_key_json(keys, 'u')}, u.op, u.lts, u.lside, u.wts, u.wside, u.by "
        f"FROM unnest({arrays}) "
        f"AS u({_names('k', len(keys))}, op, lts, lside, wts, wside, by)"
    )
