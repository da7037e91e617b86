"""The PostgreSQL sink's bookkeeping rows (sink.py): ``crossfeed_position`` (where the feed
was applied to, moved in the same database transaction as the rows) and
``crossfeed_syncpoint`` (the source's state as of consistency_ts was held then)."""

from __future__ import annotations

from typing import Any

import psycopg

from crossfeed import fencing
from crossfeed.services.sink.postgres import mapping
from crossfeed.services.sink.sorted_stream import Applied


class Fenced(RuntimeError):
    """The position row moved under this instance: another one applies the feed."""


def prepare(conn: psycopg.Connection[Any], schema: str) -> None:
    """The bookkeeping tables and the fencing columns, made if missing."""
    for statement in mapping.bookkeeping_ddl(schema):
        try:
            conn.execute(statement)
            conn.commit()
        except psycopg.errors.UniqueViolation:  # created by someone else just now
            conn.rollback()
    fencing.ensure_columns(conn, schema)


def read(conn: psycopg.Connection[Any], schema: str, feed: str) -> tuple[Any, ...]:
    """The feed's position row (made when missing): commit_ts, txn, checkpoint_ts,
    sorted_offset, epoch, failed_over_at. Leaves the transaction open."""
    position = mapping.qualified(schema, mapping.POSITION_TABLE)
    conn.execute(
        f"INSERT INTO {position} (feed, commit_ts, txn, checkpoint_ts, sorted_offset) "
        "VALUES (%s, -1, '', 0, -1) ON CONFLICT (feed) DO NOTHING",
        (feed,),
    )
    row = conn.execute(
        f"SELECT commit_ts, txn, checkpoint_ts, sorted_offset, epoch, failed_over_at "
        f"FROM {position} WHERE feed = %s",
        (feed,),
    ).fetchone()
    assert row is not None
    return tuple(row)


def move(
    conn: psycopg.Connection[Any],
    schema: str,
    feed: str,
    applied: Applied,
    offsets: tuple[int, int],
    epoch: int,
) -> None:
    """The position row from sorted offset ``offsets[0]`` (where this instance left it,
    under ``epoch``) to ``applied`` and ``offsets[1]``; Fenced if it was not there."""
    committed_offset, next_offset = offsets
    moved = conn.execute(
        f"UPDATE {mapping.qualified(schema, mapping.POSITION_TABLE)} SET commit_ts = %s, "
        "txn = %s, checkpoint_ts = %s, "
        "sorted_offset = %s, updated_at = now() WHERE feed = %s AND sorted_offset = %s "
        "AND epoch = %s",
        (
            applied.position.commit_ts,
            applied.position.txn,
            applied.checkpoint_ts,
            next_offset,
            feed,
            committed_offset,
            epoch,
        ),
    ).rowcount
    if moved != 1:
        raise Fenced(
            f"the position row of feed {feed} is no longer at sorted offset "
            f"{committed_offset} under epoch {epoch}: another sink instance "
            "applied the feed, or it was failed over"
        )


def add_syncpoint(
    conn: psycopg.Connection[Any], schema: str, feed: str, consistency: int
) -> tuple[int, int] | None:
    """A syncpoint row at ``consistency``: (consistency, target time ms), or None when
    there is one already."""
    row = conn.execute(
        f"INSERT INTO {mapping.qualified(schema, mapping.SYNCPOINT_TABLE)} "
        "(feed, consistency_ts, target_ts) VALUES (%s, %s, clock_timestamp()) "
        "ON CONFLICT DO NOTHING "
        "RETURNING (extract(epoch from target_ts) * 1000)::bigint",
        (feed, consistency),
    ).fetchone()
    return None if row is None else (consistency, int(row[0]))
