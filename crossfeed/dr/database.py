"""What a switchover does in the databases themselves (docs/disaster-recovery.md): freeze
the source, compare tables, carry sequences over, and make the reverse capture's
publication and slot on the target. The order is the caller's (``switchover.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import sql

from crossfeed.core.columns import COMMIT_TS_COLUMN, HIDDEN_COLUMNS
from crossfeed.core.switchover import Digest, comparable_columns
from crossfeed.fencing import WRITABLE_SESSION

"""crossfeed's bookkeeping in application tables: never compared, never replicated."""

Conn = psycopg.Connection[Any]


def connect(uri: str) -> Conn:
    """An operator's session: never read-only (it works on a frozen database too)."""
    return psycopg.connect(uri, autocommit=True, connect_timeout=10, options=WRITABLE_SESSION)


def now_us(conn: Conn) -> int:
    row = conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint").fetchone()
    assert row is not None
    return int(row[0])


@dataclass(frozen=True, slots=True)
class Freeze:
    sessions_ended: int
    frozen_at_us: int
    """The source's clock once no session could still commit a write."""


def freeze(conn: Conn, wait_s: float = 15.0) -> Freeze:
    """Make the database read-only for applications: new sessions start read-only
    (``default_transaction_read_only``), and every client session already open is ended —
    an open session keeps the default it started with, so only ending it stops its writes
    (its open transaction rolls back). Debezium's own sessions stay: its walsender and its
    query connection (application_name ``Debezium …``) must deliver the last changes."""
    database = _database(conn)
    conn.execute(
        sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on").format(
            sql.Identifier(database)
        )
    )
    since = conn.execute("SELECT clock_timestamp()").fetchone()
    assert since is not None
    ended = 0
    deadline = time.monotonic() + wait_s
    while True:
        # Only sessions from before the ALTER: one that connects after it is read-only
        # already (an application's pool reconnecting must not keep this loop going).
        rows = conn.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend' AND backend_start <= %s "
            "AND coalesce(application_name, '') NOT LIKE 'Debezium%%'",
            (since[0],),
        ).fetchall()
        ended += sum(1 for _pid, done in rows if done)
        if not rows:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"sessions on {database} did not end within {wait_s:.0f}s")
        time.sleep(0.1)
    return Freeze(ended, now_us(conn))


def thaw(conn: Conn) -> None:
    """Undo :func:`freeze` (a switchover that could not finish)."""
    conn.execute(
        sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(
            sql.Identifier(_database(conn))
        )
    )


def is_frozen(conn: Conn) -> bool:
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM pg_db_role_setting s JOIN pg_database d "
        "ON d.oid = s.setdatabase WHERE d.datname = current_database() AND s.setrole = 0 "
        "AND 'default_transaction_read_only=on' = ANY (s.setconfig))"
    ).fetchone()
    return bool(row and row[0])


def _database(conn: Conn) -> str:
    row = conn.execute("SELECT current_database()").fetchone()
    assert row is not None
    return str(row[0])


def columns(conn: Conn, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) AND attnum > 0 "
        "AND NOT attisdropped ORDER BY attnum",
        (_qualified(schema, table),),
    ).fetchall()
    return [str(r[0]) for r in rows]


def primary_key(conn: Conn, schema: str, table: str) -> list[str]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY (i.indkey) WHERE i.indrelid = to_regclass(%s) AND i.indisprimary "
        "ORDER BY array_position(i.indkey, a.attnum)",
        (_qualified(schema, table),),
    ).fetchall()
    return [str(r[0]) for r in rows]


def digest(conn: Conn, schema: str, table: str, columns: list[str], key: list[str]) -> Digest:
    """The rows of the table (``columns``, in ``key`` order) as a count and an md5 of each
    row's text: equal digests on two servers of one major version mean equal tables."""
    row_text = sql.SQL("ROW({})::text").format(sql.SQL(", ").join(map(sql.Identifier, columns)))
    order = sql.SQL(", ").join(map(sql.Identifier, key or columns))
    query = sql.SQL(
        "SELECT count(*), md5(coalesce(string_agg(md5({row}), '' ORDER BY {order}), '')) "
        "FROM {table}"
    ).format(row=row_text, order=order, table=sql.Identifier(schema, table))
    found = conn.execute(query).fetchone()
    assert found is not None
    return Digest(int(found[0]), str(found[1]))


def digests(
    source: Conn, source_schema: str, target: Conn, target_schema: str, tables: list[str]
) -> tuple[dict[str, Digest], dict[str, Digest]]:
    """Each table's digest on both sides, over the source's columns (hidden ones left out);
    a table the target lacks, or lacks a column of, has no digest there."""
    on_source: dict[str, Digest] = {}
    on_target: dict[str, Digest] = {}
    for table in tables:
        wanted = comparable_columns(
            columns(source, source_schema, table),
            columns(target, target_schema, table),
            HIDDEN_COLUMNS,
        )
        key = primary_key(source, source_schema, table)
        if wanted is None:
            wanted = [c for c in columns(source, source_schema, table) if c not in HIDDEN_COLUMNS]
        else:
            on_target[table] = digest(target, target_schema, table, wanted, key)
        on_source[table] = digest(source, source_schema, table, wanted, key)
    return on_source, on_target


def carry_sequences(
    source: Conn, source_schema: str, target: Conn, target_schema: str, tables: list[str]
) -> list[str]:
    """Set the target's sequences of the tables' columns (serial, identity) to where the
    source's are: logical decoding carries rows, not sequences, and the new primary must
    not hand out ids the old one already used. Returns ``table.column=value`` for each."""
    moved = []
    for table in tables:
        for column in columns(source, source_schema, table):
            seq = _sequence_of(source, source_schema, table, column)
            target_seq = _sequence_of(target, target_schema, table, column)
            if seq is None or target_seq is None:
                continue
            found = source.execute(
                sql.SQL("SELECT last_value, is_called FROM {}").format(sql.SQL(seq))
            ).fetchone()
            assert found is not None
            target.execute("SELECT setval(%s, %s, %s)", (target_seq, found[0], found[1]))
            moved.append(f"{table}.{column}={found[0]}")
    return moved


def _sequence_of(conn: Conn, schema: str, table: str, column: str) -> str | None:
    row = conn.execute(
        "SELECT pg_get_serial_sequence(%s, %s)", (_qualified(schema, table), column)
    ).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def published_tables(conn: Conn, publication: str) -> list[tuple[str, str]]:
    """(schema, table) of a publication (a Debezium connector's, filtered)."""
    rows = conn.execute(
        "SELECT schemaname, tablename FROM pg_publication_tables WHERE pubname = %s "
        "ORDER BY schemaname, tablename",
        (publication,),
    ).fetchall()
    return [(str(s), str(t)) for s, t in rows]


def make_capture(conn: Conn, name: str, schema: str, tables: list[str]) -> str:
    """A publication of the tables and a logical replication slot (pgoutput), both named
    ``name``; the slot's LSN, from which a connector that uses it streams — the
    publication first, so that decoding from the slot's start finds it. Made while nothing
    writes the tables, the slot's start is the point both databases are equal at."""
    listed = sql.SQL(", ").join(sql.Identifier(schema, t) for t in tables)
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    if exists is None:
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(sql.Identifier(name), listed)
        )
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (name,)
    ).fetchone()
    if row is None:
        row = conn.execute(
            "SELECT lsn::text FROM pg_create_logical_replication_slot(%s, 'pgoutput')", (name,)
        ).fetchone()
    assert row is not None
    return str(row[0])


def drop_capture(conn: Conn, name: str, wait_s: float = 30.0) -> list[str]:
    """Drop the slot and publication ``name`` (a removed connector's): its slot would keep
    the database's WAL forever. The slot is dropped once its connector let go of it."""
    dropped = []
    deadline = time.monotonic() + wait_s
    while True:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (name,)
        ).fetchone()
        if row is None:
            break
        if not row[0]:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (name,))
            dropped.append(f"slot {name}")
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"replication slot {name} still in use after {wait_s:.0f}s")
        time.sleep(0.5)
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone():
        conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(name)))
        dropped.append(f"publication {name}")
    return dropped


def wal_level(conn: Conn) -> str:
    row = conn.execute("SHOW wal_level").fetchone()
    return "" if row is None else str(row[0])


def _qualified(schema: str, table: str) -> str:
    return '"' + schema.replace('"', '""') + '"."' + table.replace('"', '""') + '"'


@dataclass(frozen=True, slots=True)
class Reseeded:
    table: str
    deleted: int
    written: int


def reseed(
    source: Conn, source_schema: str, target_dsn: str, target_schema: str, tables: list[str]
) -> list[Reseeded]:
    """Make the source's tables equal to one snapshot of the target's (REPEATABLE READ,
    taken now): rows only the source has are deleted, rows missing or different are
    written; equal rows are left alone. One transaction on the source; crossfeed's
    ``_crossfeed_commit_ts`` of a written row is 0, so the reverse feed's changes (newer)
    apply over it."""
    done = []
    with psycopg.connect(target_dsn, connect_timeout=10) as snap:
        snap.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        with source.transaction():
            for table in tables:
                done.append(_reseed_table(source, source_schema, snap, target_schema, table))
        snap.rollback()
    return done


def _reseed_table(
    source: Conn, source_schema: str, snap: Conn, target_schema: str, table: str
) -> Reseeded:
    source_columns = columns(source, source_schema, table)
    wanted = comparable_columns(source_columns, columns(snap, target_schema, table), HIDDEN_COLUMNS)
    if wanted is None:
        raise ValueError(f"{target_schema}.{table} lacks columns of {source_schema}.{table}")
    key = primary_key(source, source_schema, table)
    at = [wanted.index(k) for k in key]
    # As text both ways: compared as the server prints them, written back for the server
    # to read (psycopg sends text untyped), whatever the column types.
    listed = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in wanted)

    def rows(conn: Conn, schema: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
        query = sql.SQL("SELECT {} FROM {}").format(listed, sql.Identifier(schema, table))
        return {tuple(r[i] for i in at): tuple(r) for r in conn.execute(query)}

    theirs, ours = rows(snap, target_schema), rows(source, source_schema)
    gone = [k for k in ours if k not in theirs]
    changed = [row for k, row in theirs.items() if ours.get(k) != row]
    where = sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(k)) for k in key)
    with source.cursor() as cur:
        if gone:
            cur.executemany(
                sql.SQL("DELETE FROM {} WHERE {}").format(
                    sql.Identifier(source_schema, table), where
                ),
                gone,
            )
        if changed:
            stamped = COMMIT_TS_COLUMN in source_columns
            names = [*wanted, *([COMMIT_TS_COLUMN] if stamped else [])]
            updates = sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in names
            )
            cur.executemany(
                sql.SQL(
                    "INSERT INTO {} ({}) OVERRIDING SYSTEM VALUE VALUES ({}) "
                    "ON CONFLICT ({}) DO UPDATE SET {}"
                ).format(
                    sql.Identifier(source_schema, table),
                    sql.SQL(", ").join(map(sql.Identifier, names)),
                    sql.SQL(", ").join(sql.Placeholder() * len(names)),
                    sql.SQL(", ").join(map(sql.Identifier, key)),
                    updates,
                ),
                [(*row, 0) if stamped else row for row in changed],
            )
    return Reseeded(table, len(gone), len(changed))


def emit_marker(conn: Conn, prefix: str, content: str) -> str:
    """A logical decoding message in the WAL (Debezium writes it to ``<prefix>.message``):
    once it is there, so is every change committed before it. Its LSN."""
    row = conn.execute(
        "SELECT pg_logical_emit_message(true, %s, %s)::text", (prefix, content)
    ).fetchone()
    assert row is not None
    return str(row[0])
