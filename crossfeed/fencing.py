"""Fencing an ordered feed's PostgreSQL target at a failover, and the failover's row there
(docs/disaster-recovery.md). Shared by the sink (which checks the fence) and the
coordinator (which sets it); the decisions are in ``crossfeed/core/takeover.py``.

The sink's position row (``S.crossfeed_position``, written in the same transaction as
the data) carries ``epoch`` and ``failed_over_at``. A sink reads both when it takes the
feed (under its advisory lock) and moves the row only while the epoch is the one it read;
it applies nothing once ``failed_over_at`` is set. :func:`fence` ends the sessions holding
the feed's advisory lock (a paused or partitioned sink's open transaction dies with its
session), takes the lock itself, bumps the epoch and sets ``failed_over_at`` — after it
commits, no sink of the feed writes to the target again. The failover's report is a row
of ``S.crossfeed_failover`` (:func:`record`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Final

import psycopg

POSITION_TABLE: Final = "crossfeed_position"
FAILOVER_TABLE: Final = "crossfeed_failover"
LOCK_CLASS: Final = "crossfeed-sink"
"""The sink's advisory lock is (hashtext('crossfeed-sink'), hashtext(feed))."""
TAKE_LOCK_S = 15.0


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _qualified(schema: str, table: str) -> str:
    return f"{_ident(schema)}.{_ident(table)}"


WRITABLE_SESSION = "-c default_transaction_read_only=off"
"""libpq ``options`` of every crossfeed session that writes into a target: a database that
a switchover made read-only for applications (docs/disaster-recovery.md) is still fenced,
reset and written by crossfeed."""


def _connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=10, options=WRITABLE_SESSION)


def ensure_columns(conn: psycopg.Connection[Any], schema: str) -> None:
    """Add the fence's columns to a position table made before them (committed)."""
    have = {
        name
        for (name,) in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = to_regclass(%s) "
            "AND attnum > 0 AND NOT attisdropped",
            (_qualified(schema, POSITION_TABLE),),
        ).fetchall()
    }
    if "epoch" not in have or "failed_over_at" not in have:
        conn.execute(
            f"ALTER TABLE {_qualified(schema, POSITION_TABLE)} "
            "ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0, "
            "ADD COLUMN IF NOT EXISTS failed_over_at timestamptz"
        )
    conn.commit()


@dataclass(frozen=True, slots=True)
class Position:
    """The position row as the fence left it."""

    commit_ts: int
    txn: str
    checkpoint_ts: int
    sorted_offset: int
    epoch: int
    failed_over_at_ms: int
    terminated: int
    """Sessions ended because they held the feed's lock (sinks)."""


def fence(dsn: str, schema: str, feed: str, *, take_lock_s: float = TAKE_LOCK_S) -> Position:
    """Stop every sink of ``feed`` writing to the target, for good (module doc).

    LookupError: the target has no position row for the feed (no sink ever applied it);
    TimeoutError: the lock could not be taken within ``take_lock_s``."""
    with _connect(dsn) as conn:
        conn.execute("SET lock_timeout = '10s'")
        terminated = 0
        deadline = time.monotonic() + take_lock_s
        while True:
            # Other holders of the feed's lock: sink sessions. Their open transactions
            # roll back as they end.
            rows = conn.execute(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_locks "
                "WHERE locktype = 'advisory' AND granted AND objsubid = 2 "
                "AND classid = hashtext(%s)::oid AND objid = hashtext(%s)::oid "
                "AND pid <> pg_backend_pid()",
                (LOCK_CLASS, feed),
            ).fetchall()
            terminated += sum(1 for _, ended in rows if ended)
            got = conn.execute(
                "SELECT pg_try_advisory_lock(hashtext(%s), hashtext(%s))", (LOCK_CLASS, feed)
            ).fetchone()
            if got and got[0]:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"could not take feed {feed}'s lock on the target in {take_lock_s:.0f}s"
                )
            time.sleep(0.2)
        try:
            if conn.execute(
                "SELECT to_regclass(%s)", (_qualified(schema, POSITION_TABLE),)
            ).fetchone() == (None,):
                raise LookupError(f"no {schema}.{POSITION_TABLE} on the target")
            conn.autocommit = False
            ensure_columns(conn, schema)
            row = conn.execute(
                f"UPDATE {_qualified(schema, POSITION_TABLE)} SET epoch = epoch + 1, "
                "failed_over_at = coalesce(failed_over_at, clock_timestamp()) WHERE feed = %s "
                "RETURNING commit_ts, txn, checkpoint_ts, sorted_offset, epoch, "
                "(extract(epoch from failed_over_at) * 1000)::bigint",
                (feed,),
            ).fetchone()
            if row is None:
                conn.rollback()
                raise LookupError(f"no row for feed {feed} in {schema}.{POSITION_TABLE}")
            conn.commit()
        finally:
            if not conn.autocommit:
                conn.rollback()  # nothing after a commit; what failed before it
                conn.autocommit = True
            conn.execute(
                "SELECT pg_advisory_unlock(hashtext(%s), hashtext(%s))", (LOCK_CLASS, feed)
            )
    commit_ts, txn, checkpoint_ts, sorted_offset, epoch, failed_over_at_ms = row
    return Position(
        commit_ts, txn, checkpoint_ts, sorted_offset, epoch, failed_over_at_ms, terminated
    )


def failover_ddl(schema: str) -> str:
    return (
        f"CREATE TABLE IF NOT EXISTS {_qualified(schema, FAILOVER_TABLE)} ("
        "feed text NOT NULL, epoch bigint NOT NULL, "
        "failed_over_at timestamptz NOT NULL, consistency_ts bigint NOT NULL, "
        "last_txn text NOT NULL, last_commit_ts bigint NOT NULL, "
        "rpo_transactions bigint NOT NULL, rpo_exact boolean NOT NULL, "
        "rpo_known_from text NOT NULL, lost_from_ts bigint, lost_until_ts bigint, "
        "rpo_span_s double precision NOT NULL, report jsonb NOT NULL, "
        "PRIMARY KEY (feed, epoch))"
    )


def record(dsn: str, schema: str, feed: str, epoch: int, report: dict[str, Any]) -> None:
    """The failover's report as a row of ``S.crossfeed_failover`` (once per epoch); a
    switchover keeps its report the same way (``kind`` switchover, RPO 0)."""
    rpo = report["rpo"]
    with _connect(dsn) as conn:
        conn.execute(failover_ddl(schema))
        conn.execute(
            f"INSERT INTO {_qualified(schema, FAILOVER_TABLE)} (feed, epoch, failed_over_at, "
            "consistency_ts, last_txn, last_commit_ts, rpo_transactions, rpo_exact, "
            "rpo_known_from, lost_from_ts, lost_until_ts, rpo_span_s, report) VALUES "
            "(%s, %s, to_timestamp(%s / 1000.0), %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (feed, epoch) DO NOTHING",
            (
                feed,
                epoch,
                report["failed_over_at_ms"],
                report["consistency_ts_us"],
                report["last_txn"],
                report["last_commit_ts_us"],
                rpo["transactions"],
                rpo["exact"],
                rpo["known_from"],
                rpo["first_lost_us"],
                rpo["last_lost_us"],
                rpo["span_s"],
                json.dumps(report),
            ),
        )


def latest(dsn: str, schema: str, feed: str) -> dict[str, Any] | None:
    """The newest failover report of ``feed`` on the target, or None (a switchover's row
    is not one: the feed was paused, not failed over)."""
    with _connect(dsn) as conn:
        if conn.execute(
            "SELECT to_regclass(%s)", (_qualified(schema, FAILOVER_TABLE),)
        ).fetchone() == (None,):
            return None
        row = conn.execute(
            f"SELECT report FROM {_qualified(schema, FAILOVER_TABLE)} WHERE feed = %s "
            "AND coalesce(report->>'kind', 'ordered') = 'ordered' ORDER BY epoch DESC LIMIT 1",
            (feed,),
        ).fetchone()
    return dict(row[0]) if row else None


def advance_sequences(dsn: str, schema: str) -> list[str]:
    """Move each sequence of the schema's tables (serial, identity) past the largest value
    its column holds: the target becomes the primary, and logical decoding carried rows,
    not sequences — without this its first inserts would take ids already used.
    ``table.column=value`` for each one moved."""
    moved = []
    with _connect(dsn) as conn:
        found = conn.execute(
            "SELECT c.relname, a.attname, pg_get_serial_sequence("
            "format('%%I.%%I', n.nspname, c.relname), a.attname) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace JOIN pg_attribute a "
            "ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND pg_get_serial_sequence("
            "format('%%I.%%I', n.nspname, c.relname), a.attname) IS NOT NULL",
            (schema,),
        ).fetchall()
        for table, column, sequence in found:
            top = conn.execute(
                f"SELECT max({_ident(column)}) FROM {_qualified(schema, table)}"
            ).fetchone()
            if top is None or top[0] is None:
                continue
            conn.execute(
                f"SELECT setval(%s, greatest(%s, (SELECT last_value FROM {sequence})))",
                (sequence, top[0]),
            )
            moved.append(f"{table}.{column}={top[0]}")
    return moved
