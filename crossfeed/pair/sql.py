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

The sink applies each change with :data:`APPLY_FUNCTION` (one call per change, in commit
order, inside the database transaction of its source transaction). Its session sets
``crossfeed.applying`` (the triggers then leave the hidden columns and tombstones to it) and
a replication origin named :func:`origin` (every change it writes is then marked in the
logical decoding stream, and the other direction's Debezium reader drops it: nothing is sent
back).
"""

from __future__ import annotations

from typing import Final

from crossfeed.wire.debezium import ORIGIN_PREFIX

TS_COLUMN: Final = "_crossfeed_ts"
SIDE_COLUMN: Final = "_crossfeed_side"
HIDDEN_COLUMNS: Final = (TS_COLUMN, SIDE_COLUMN)
TOMBSTONES: Final = "crossfeed_tombstones"
CONFLICTS: Final = "crossfeed_conflicts"
APPLYING_SETTING: Final = "crossfeed.applying"
STAMP_TRIGGER: Final = "crossfeed_stamp"
TOMBSTONE_TRIGGER: Final = "crossfeed_tombstone"
# What the apply function answers for one change.
APPLIED: Final = "applied"  # written
WON: Final = "won"  # written over a row (or tombstone) this side wrote itself
LOST: Final = "lost"  # skipped: the row or its tombstone is newer (recorded as a conflict)
KEPT: Final = "kept"  # a snapshot row where the row already is: nothing to do


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
        APPLY_FUNCTION.replace("@S", s).replace("@L", literal(schema)),
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


def apply_call(schema: str) -> str:
    """One change through :data:`APPLY_FUNCTION`; parameters, in order: feed, table, op
    (upsert or delete), the row (jsonb: column -> value), the key (jsonb), the counter
    differences (jsonb or NULL), the source commit µs, the source side, this side, and
    whether it is a snapshot row (inserted only where the row is absent)."""
    return (
        f"SELECT {ident(schema)}.crossfeed_apply("
        "%s, %s, %s, %s::jsonb, %s::jsonb, %s::jsonb, %s, %s, %s, %s)"
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

# One replicated change, last writer wins (module docstring). Answers applied, won, lost
# or kept. Dynamic SQL: one function serves every table; values travel as jsonb and take
# the column types through jsonb_populate_record.
APPLY_FUNCTION: Final = """
CREATE OR REPLACE FUNCTION @S.crossfeed_apply(
    p_feed text, p_table text, p_op text, p_row jsonb, p_key jsonb, p_deltas jsonb,
    p_ts bigint, p_side text, p_local text, p_snapshot boolean
) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    tgt text := format('%I.%I', @L, p_table);
    key_match text;
    norm jsonb;
    row_ts bigint;
    row_side text;
    tomb_ts bigint;
    tomb_side text;
    has_tomb boolean;
    sets text;
    counters text;
    cols text;
    n bigint;
    deltas jsonb := coalesce(p_deltas, '{}'::jsonb);
BEGIN
    SELECT string_agg(format('t.%1$I = r.%1$I', k), ' AND ') INTO key_match
    FROM jsonb_object_keys(p_key) AS k;
    -- the key as the delete trigger writes it (to_jsonb of the typed values)
    EXECUTE format('SELECT jsonb_object_agg(k, to_jsonb(r) -> k) '
                   'FROM jsonb_populate_record(NULL::%s, $1) r, jsonb_object_keys($1) k', tgt)
        INTO norm USING p_key;
    SELECT coalesce(d.ts, @S.crossfeed_commit_us(d.xmin)), coalesce(d.side, p_local)
        INTO tomb_ts, tomb_side
        FROM @S.crossfeed_tombstones d WHERE d.tbl = p_table AND d.key = norm;
    has_tomb := FOUND;
    LOOP
        EXECUTE format('SELECT coalesce(t._crossfeed_ts, @S.crossfeed_commit_us(t.xmin)), '
                       'coalesce(t._crossfeed_side, $2) FROM %s t, '
                       'jsonb_populate_record(NULL::%s, $1) r WHERE %s FOR UPDATE OF t',
                       tgt, tgt, key_match)
            INTO row_ts, row_side USING p_key, p_local;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            IF p_snapshot THEN
                RETURN 'kept';
            END IF;
            IF (p_ts, p_side COLLATE "C") > (row_ts, row_side COLLATE "C") THEN
                IF p_op = 'delete' THEN
                    EXECUTE format('DELETE FROM %s t USING jsonb_populate_record(NULL::%s, $1) r '
                                   'WHERE %s', tgt, tgt, key_match) USING p_key;
                    INSERT INTO @S.crossfeed_tombstones AS d (tbl, key, ts, side)
                    VALUES (p_table, norm, p_ts, p_side)
                    ON CONFLICT (tbl, key) DO UPDATE SET ts = excluded.ts, side = excluded.side
                    WHERE (coalesce(d.ts, @S.crossfeed_commit_us(d.xmin)),
                           coalesce(d.side, p_local) COLLATE "C")
                        < (excluded.ts, excluded.side COLLATE "C");
                ELSE
                    SELECT string_agg(CASE WHEN deltas ? c
                        THEN format('%1$I = coalesce(t.%1$I, 0) + d.%1$I', c)
                        ELSE format('%1$I = r.%1$I', c) END, ', ') INTO sets
                    FROM jsonb_object_keys(p_row) AS c
                    WHERE NOT p_key ? c AND c NOT IN ('_crossfeed_ts', '_crossfeed_side');
                    EXECUTE format('UPDATE %s t SET %s_crossfeed_ts = $3, _crossfeed_side = $4 '
                                   'FROM jsonb_populate_record(NULL::%s, $1) r, '
                                   'jsonb_populate_record(NULL::%s, $2) d WHERE %s',
                                   tgt, coalesce(sets || ', ', ''), tgt, tgt, key_match)
                        USING p_row, deltas, p_ts, p_side;
                END IF;
                IF row_side = p_local THEN
                    RETURN 'won';
                END IF;
                RETURN 'applied';
            END IF;
            -- it loses; its counter differences still count
            IF p_op <> 'delete' AND deltas <> '{}'::jsonb THEN
                SELECT string_agg(format('%1$I = coalesce(t.%1$I, 0) + d.%1$I', c), ', ')
                    INTO counters FROM jsonb_object_keys(deltas) AS c;
                EXECUTE format('UPDATE %s t SET %s, _crossfeed_ts = $3, _crossfeed_side = $4 '
                               'FROM jsonb_populate_record(NULL::%s, $1) r, '
                               'jsonb_populate_record(NULL::%s, $2) d WHERE %s',
                               tgt, counters, tgt, tgt, key_match)
                    USING p_key, deltas, row_ts, row_side;
            END IF;
            INSERT INTO @S.crossfeed_conflicts
                (feed, tbl, key, op, lost_ts, lost_side, won_ts, won_side, won_by)
            VALUES (p_feed, p_table, norm, p_op, p_ts, p_side, row_ts, row_side, 'row');
            RETURN 'lost';
        END IF;
        -- no row
        IF p_op = 'delete' THEN
            INSERT INTO @S.crossfeed_tombstones AS d (tbl, key, ts, side)
            VALUES (p_table, norm, p_ts, p_side)
            ON CONFLICT (tbl, key) DO UPDATE SET ts = excluded.ts, side = excluded.side
            WHERE (coalesce(d.ts, @S.crossfeed_commit_us(d.xmin)),
                   coalesce(d.side, p_local) COLLATE "C")
                < (excluded.ts, excluded.side COLLATE "C");
            RETURN 'applied';
        END IF;
        IF has_tomb AND NOT p_snapshot
           AND (p_ts, p_side COLLATE "C") <= (tomb_ts, tomb_side COLLATE "C") THEN
            INSERT INTO @S.crossfeed_conflicts
                (feed, tbl, key, op, lost_ts, lost_side, won_ts, won_side, won_by)
            VALUES (p_feed, p_table, norm, p_op, p_ts, p_side, tomb_ts, tomb_side, 'delete');
            RETURN 'lost';
        END IF;
        IF has_tomb AND p_snapshot THEN
            RETURN 'kept';  -- deleted here since: a snapshot row does not bring it back
        END IF;
        SELECT string_agg(format('%I', c), ', ') INTO cols
        FROM jsonb_object_keys(p_row) AS c WHERE c NOT IN ('_crossfeed_ts', '_crossfeed_side');
        EXECUTE format('INSERT INTO %s (%s, _crossfeed_ts, _crossfeed_side) '
                       'SELECT %s, $2, $3 FROM jsonb_populate_record(NULL::%s, $1) r '
                       'ON CONFLICT DO NOTHING', tgt, cols, cols, tgt)
            USING p_row, p_ts, p_side;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            IF has_tomb AND tomb_side = p_local THEN
                RETURN 'won';
            END IF;
            RETURN 'applied';
        END IF;
        -- an application inserted the key meanwhile: compare with its row
    END LOOP;
END
$fn$"""
