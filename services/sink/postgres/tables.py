"""What the PostgreSQL sink knows of a target table: its columns and primary key, read
from the catalog (pg_attribute, pg_index)."""

from __future__ import annotations

from typing import Any

import psycopg

from crossfeed.services.sink.postgres.mapping import TableSchema


def read_table(conn: psycopg.Connection[Any], name: str) -> TableSchema | None:
    """The table ``name`` (qualified) as it is, or None when there is no such table."""
    columns = conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
        "WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped "
        "ORDER BY a.attnum",
        (name,),
    ).fetchall()
    if not columns:
        return None
    key = conn.execute(
        "SELECT a.attname FROM pg_index i "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
        "WHERE i.indrelid = to_regclass(%s) AND i.indisprimary ORDER BY k.ord",
        (name,),
    ).fetchall()
    return TableSchema({c: t for c, t in columns}, tuple(k for (k,) in key))
