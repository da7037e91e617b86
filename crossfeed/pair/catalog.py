"""The facts :mod:`crossfeed.core.pair_checks` decides on, read from a database's catalogs
(psycopg), and :func:`table_findings` for a table that appears while a pair runs."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from crossfeed.core.pair_checks import (
    BOOKKEEPING_TABLES,
    ColumnFacts,
    Finding,
    KeySequence,
    ServerFacts,
    TableFacts,
    UniqueIndex,
    check_table,
)

ORIGIN_FUNCTIONS = (
    "pg_replication_origin_create(text)",
    "pg_replication_origin_session_setup(text)",
)
"""What the sink calls to mark its writes (crossfeed/pair/sql.py's origin)."""


def server_facts(conn: Any, side: str) -> ServerFacts:
    """``conn``: a psycopg connection to the side's database as the pair's user."""
    privileges = " AND ".join(f"has_function_privilege('{f}', 'EXECUTE')" for f in ORIGIN_FUNCTIONS)
    row = conn.execute(
        "SELECT current_user, current_setting('track_commit_timestamp'), "
        "current_setting('wal_level'), r.rolsuper, r.rolreplication, "
        f"{privileges} FROM pg_roles r WHERE r.rolname = current_user"
    ).fetchone()
    user, track, wal_level, superuser, replication, origins = row
    return ServerFacts(
        side=side,
        user=str(user),
        track_commit_timestamp=track == "on",
        wal_level=str(wal_level),
        superuser=bool(superuser),
        replication=bool(replication),
        origin_functions=bool(origins),
    )


def schema_tables(conn: Any, schema: str) -> list[str]:
    """The ordinary and partitioned tables of ``schema``, without crossfeed's own."""
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
        "ORDER BY c.relname",
        (schema,),
    ).fetchall()
    return [str(r[0]) for r in rows if r[0] not in BOOKKEEPING_TABLES]


def table_facts(conn: Any, schema: str, table: str) -> TableFacts:
    """One table's key, columns (with the sequences behind generated ones), unique indexes
    besides the key, replica identity, and whether this user may alter it."""
    found = conn.execute(
        "SELECT c.oid, c.relreplident, pg_has_role(c.relowner, 'USAGE') OR "
        "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user) "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relname = %s AND c.relkind IN ('r', 'p')",
        (schema, table),
    ).fetchone()
    if found is None:
        return TableFacts(schema, table, exists=False)
    oid, replident, may_alter = found
    key = [
        str(r[0])
        for r in conn.execute(
            "SELECT a.attname FROM pg_index i "
            "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum "
            "WHERE i.indrelid = %s AND i.indisprimary ORDER BY k.n",
            (oid,),
        ).fetchall()
    ]
    unique = tuple(
        UniqueIndex(str(name), str(definition))
        for name, definition in conn.execute(
            "SELECT c.relname, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indrelid = %s AND i.indisunique AND NOT i.indisprimary ORDER BY c.relname",
            (oid,),
        ).fetchall()
    )
    columns = []
    for name, type_, default, identity in conn.execute(
        "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
        "pg_get_expr(d.adbin, d.adrelid), a.attidentity <> '' "
        "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid "
        "AND d.adnum = a.attnum WHERE a.attrelid = %s AND a.attnum > 0 "
        "AND NOT a.attisdropped ORDER BY a.attnum",
        (oid,),
    ).fetchall():
        column = ColumnFacts(str(name), str(type_), default, bool(identity))
        if column.generated:
            sequence = _sequence(conn, schema, table, column)
            column = ColumnFacts(column.name, column.type, default, column.identity, sequence)
        columns.append(column)
    return TableFacts(
        schema,
        table,
        primary_key=tuple(key),
        columns=tuple(columns),
        unique=unique,
        replica_identity=str(replident),
        may_alter=bool(may_alter),
    )


def _sequence(conn: Any, schema: str, table: str, column: ColumnFacts) -> KeySequence | None:
    """The sequence a generated column draws from: its owned one (serial, identity), else
    the one its default names (``nextval('s'::regclass)``)."""
    row = conn.execute(
        "SELECT pg_get_serial_sequence(quote_ident(%s) || '.' || quote_ident(%s), %s)",
        (schema, table, column.name),
    ).fetchone()
    name = row[0] if row else None
    if name is None:
        match = re.search(r"nextval\('([^']+)'", column.default or "")
        name = match.group(1) if match else None
    if name is None:
        return None
    found = conn.execute(
        "SELECT seqrelid::regclass::text, seqincrement, seqmin, seqmax FROM pg_sequence "
        "WHERE seqrelid = to_regclass(%s)",
        (name,),
    ).fetchone()
    if found is None:
        return None
    # Its last value (after RESTART WITH n: n, not yet handed out): every later value
    # differs from it by a multiple of the increment. The name is the catalog's own.
    last = conn.execute(f"SELECT last_value FROM {found[0]}").fetchone()
    return KeySequence(str(name), int(last[0]), int(found[1]), int(found[2]), int(found[3]))


def table_findings(
    conn: Any, side: str, schema: str, table: str, counters: Iterable[str] = ()
) -> list[Finding]:
    """For the sink, when a table appears in a running pair: what makes it unsafe on this
    side (``counters``: its counter columns). Empty when it is safe."""
    return check_table(side, table_facts(conn, schema, table), counters)
