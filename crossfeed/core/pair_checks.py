"""What makes two PostgreSQL databases unsafe to run active-active, decided from facts
gathered elsewhere (``crossfeed/pair/catalog.py`` reads them from the catalogs): no I/O.

Both databases take writes and each one's changes are applied to the other, last writer
wins (docs/active-active.md). What breaks that, and is refused here:

* a **server** that cannot take part: ``track_commit_timestamp`` off (an application
  write's time is its transaction's commit time), ``wal_level`` not ``logical`` (Debezium
  captures it), a user that may not set a replication origin (the sink marks what it
  applies, so it is never sent back) or may not replicate (Debezium's slot);
* a **table** missing on one side, or whose primary key differs between the sides;
* a table **without a primary key**: rows are compared by key;
* a **unique constraint or index other than the primary key**: both sides may insert the
  same value under different keys, and applying the other side's row then fails;
* a **key generated on both sides** (serial, identity, a sequence default): both sides
  hand out the same numbers to different rows; disjoint sequences (same increment of at
  least 2, different starts modulo it; or ranges that do not overlap) are safe;
* a **counter** column (its changes are added, not set) that is not numeric, is part of
  the key, or whose table cannot give the old value (``REPLICA IDENTITY FULL``);
* a table the user does not own: the pair's hidden columns and triggers, and Debezium's
  publication, need its owner (or a superuser).

A finding is one line with the exact reason and what to do. Server, key and counter
findings always refuse; unique constraints and generated keys refuse unless the user
says to go on (``--allow-unsafe``), and are then listed as warnings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

BOOKKEEPING_TABLES = frozenset(
    {"crossfeed_position", "crossfeed_syncpoint", "crossfeed_tombstones", "crossfeed_conflicts"}
)
"""crossfeed's own tables in a target schema: never captured, never part of a pair."""

NUMERIC_TYPES = frozenset(
    {"smallint", "integer", "bigint", "numeric", "real", "double precision", "money"}
)

PAIR_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,49}$")
"""A pair's name: its feeds are NAME-a-to-b and NAME-b-to-a (feed names are at most 63),
its connectors' topic prefixes NAME-a and NAME-b, their slots crossfeed_NAME_a/_b (at most
63); no '_', so two names never map to one slot."""


@dataclass(frozen=True)
class ServerFacts:
    """One database server as the pair's user sees it."""

    side: str  # the side's name (its cluster alias, e.g. dc-a)
    user: str
    track_commit_timestamp: bool
    wal_level: str
    superuser: bool
    replication: bool  # rolreplication: may open Debezium's replication slot
    origin_functions: bool  # may EXECUTE pg_replication_origin_* (create, session setup)


@dataclass(frozen=True)
class KeySequence:
    """A sequence behind a key column's default (``pg_sequences``). ``start`` is a value of
    its progression: the last it handed out, else its start; every later value is
    ``start + k * increment``."""

    name: str
    start: int
    increment: int
    minimum: int
    maximum: int


@dataclass(frozen=True)
class ColumnFacts:
    name: str
    type: str  # format_type(), e.g. "bigint", "numeric(12,2)", "text"
    default: str | None = None  # pg_get_expr of its default
    identity: bool = False  # GENERATED ... AS IDENTITY
    sequence: KeySequence | None = None  # the sequence its default or identity draws from

    @property
    def numeric(self) -> bool:
        return self.type.split("(", 1)[0].strip() in NUMERIC_TYPES

    @property
    def generated(self) -> bool:
        """Does the database make this column's values (serial, identity, nextval)?"""
        return self.identity or "nextval(" in (self.default or "")


@dataclass(frozen=True)
class UniqueIndex:
    name: str
    definition: str  # pg_get_indexdef, e.g. CREATE UNIQUE INDEX ... ON s.t USING btree (email)


@dataclass(frozen=True)
class TableFacts:
    """One table on one side; ``exists=False`` and nothing else when it is missing."""

    schema: str
    table: str
    exists: bool = True
    primary_key: tuple[str, ...] = ()
    columns: tuple[ColumnFacts, ...] = ()
    unique: tuple[UniqueIndex, ...] = ()  # unique indexes besides the primary key's
    replica_identity: str = "d"  # pg_class.relreplident: d(efault) f(ull) i(ndex) n(othing)
    may_alter: bool = True  # owner or superuser: may set REPLICA IDENTITY FULL

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    def column(self, name: str) -> ColumnFacts | None:
        return next((c for c in self.columns if c.name == name), None)


@dataclass(frozen=True)
class Finding:
    """One reason a pair is unsafe: ``where`` is ``side: schema.table`` (or the side)."""

    where: str
    reason: str
    fix: str
    overridable: bool = False  # --allow-unsafe goes on past it (a warning then)
    kind: str = ""

    def line(self) -> str:
        return f"{self.where}: {self.reason}; {self.fix}"


@dataclass
class Findings:
    """All findings of a pair, refusals first."""

    items: list[Finding] = field(default_factory=list)

    @property
    def refusals(self) -> list[Finding]:
        return [f for f in self.items if not f.overridable]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.items if f.overridable]

    def blocking(self, allow_unsafe: bool) -> list[Finding]:
        """What stops the pair: refusals, and warnings unless the user allows them."""
        return self.refusals if allow_unsafe else self.refusals + self.warnings


def check_server(facts: ServerFacts) -> list[Finding]:
    """What one server lacks for active-active."""
    where = f"{facts.side} ({facts.user})"
    found = []
    if not facts.track_commit_timestamp:
        found.append(
            Finding(
                where,
                "track_commit_timestamp is off, so an application write has no commit time "
                "to compare",
                "set track_commit_timestamp = on in postgresql.conf (or ALTER SYSTEM SET "
                "track_commit_timestamp = on) and restart the server",
                kind="server",
            )
        )
    if facts.wal_level != "logical":
        found.append(
            Finding(
                where,
                f"wal_level is {facts.wal_level}, so Debezium cannot capture this side",
                "set wal_level = logical (ALTER SYSTEM SET wal_level = logical) and restart "
                "the server",
                kind="server",
            )
        )
    if not (facts.superuser or facts.replication):
        found.append(
            Finding(
                where,
                f"user {facts.user} may not replicate, so Debezium cannot open its slot",
                f"ALTER ROLE {_ident(facts.user)} REPLICATION (or use a superuser)",
                kind="server",
            )
        )
    if not (facts.superuser or facts.origin_functions):
        found.append(
            Finding(
                where,
                f"user {facts.user} may not use replication origins, which mark what the "
                "sink applies so it is never sent back",
                "GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text), "
                "pg_replication_origin_session_setup(text) "
                f"TO {_ident(facts.user)} in this database "
                "(or use a superuser)",
                kind="server",
            )
        )
    return found


def check_table(side: str, facts: TableFacts, counters: Iterable[str] = ()) -> list[Finding]:
    """What makes one table unsafe on one side, on its own (also for a table that appears
    while a pair runs). A generated key is flagged unless its sequence steps by 2 or more
    (then :func:`check_pair` decides with the other side's)."""
    where = f"{side}: {facts.qualified}"
    if not facts.exists:
        return [
            Finding(
                where,
                "the table does not exist on this side",
                "create it with the same columns and primary key on both sides",
                kind="missing_table",
            )
        ]
    found = []
    if not facts.may_alter:
        found.append(
            Finding(
                where,
                "this user does not own the table, so the pair cannot add its hidden columns "
                "and triggers, nor Debezium add it to its publication",
                f"ALTER TABLE {facts.qualified} OWNER TO the pair's user, or use a superuser",
                kind="owner",
            )
        )
    if not facts.primary_key:
        found.append(
            Finding(
                where,
                "the table has no primary key, so the two sides' rows cannot be matched",
                "add a primary key (a UUID column, e.g. id uuid PRIMARY KEY DEFAULT "
                "gen_random_uuid(), is safe on both sides)",
                kind="no_primary_key",
            )
        )
    for index in facts.unique:
        found.append(
            Finding(
                where,
                f"unique index {index.name} besides the primary key ({_columns_of(index)}): "
                "both sides can insert the same value under different keys, and the other "
                "side's row then cannot be applied",
                "drop the constraint, make it the primary key, or go on with --allow-unsafe "
                "if only one side ever writes those values",
                overridable=True,
                kind="unique",
            )
        )
    for name in facts.primary_key:
        column = facts.column(name)
        if column is None or not column.generated:
            continue
        sequence = column.sequence
        if sequence is not None and abs(sequence.increment) >= 2:
            continue  # maybe disjoint: check_pair compares both sides' sequences
        found.append(_generated_key(where, facts, column))
    found += _counter_findings(where, facts, counters)
    return found


def check_pair(
    a: TableFacts, b: TableFacts, side_a: str, side_b: str, counters: Iterable[str] = ()
) -> list[Finding]:
    """One table on both sides: each side's own findings, then what the two disagree on
    (primary key, key sequences that overlap)."""
    counters = tuple(counters)
    found = _merged(check_table(side_a, a, counters), check_table(side_b, b, counters), side_b)
    if not (a.exists and b.exists):
        return found
    if a.primary_key and b.primary_key and a.primary_key != b.primary_key:
        found.append(
            Finding(
                f"{side_a}, {side_b}: {a.qualified}",
                f"the primary key differs: ({', '.join(a.primary_key)}) on {side_a}, "
                f"({', '.join(b.primary_key)}) on {side_b}",
                "give the table the same primary key on both sides",
                kind="key_differs",
            )
        )
        return found
    for name in a.primary_key:
        col_a, col_b = a.column(name), b.column(name)
        if col_a is None or col_b is None or not (col_a.generated and col_b.generated):
            continue
        seq_a, seq_b = col_a.sequence, col_b.sequence
        if seq_a is None or seq_b is None or abs(seq_a.increment) < 2 or abs(seq_b.increment) < 2:
            continue  # already found by check_table
        if not disjoint(seq_a, seq_b):
            found.append(
                _generated_key(
                    f"{side_a}, {side_b}: {a.qualified}",
                    a,
                    col_a,
                    f" (sequences {seq_a.name} and {seq_b.name} overlap: start {seq_a.start} "
                    f"by {seq_a.increment} and start {seq_b.start} by {seq_b.increment})",
                )
            )
    return found


def _merged(on_a: list[Finding], on_b: list[Finding], side_b: str) -> list[Finding]:
    """One finding for both sides where they say the same of the same table."""
    rest = list(on_b)
    found = []
    for finding in on_a:
        twin = next((f for f in rest if (f.reason, f.fix) == (finding.reason, finding.fix)), None)
        if twin is None:
            found.append(finding)
            continue
        rest.remove(twin)
        side_a, _, table = finding.where.partition(": ")
        found.append(replace(finding, where=f"{side_a}, {side_b}: {table}"))
    return found + rest


def disjoint(a: KeySequence, b: KeySequence) -> bool:
    """Can the two sequences never hand out the same value? Their ranges do not overlap,
    or they step by the same amount from starts that differ modulo it."""
    if a.maximum < b.minimum or b.maximum < a.minimum:
        return True
    step = abs(a.increment)
    return step >= 2 and step == abs(b.increment) and (a.start - b.start) % step != 0


def _generated_key(where: str, facts: TableFacts, column: ColumnFacts, why: str = "") -> Finding:
    how = "an identity column" if column.identity else f"default {column.default}"
    sequence = column.sequence.name if column.sequence else "<its sequence>"
    return Finding(
        where,
        f"key column {column.name} is generated on both sides ({how}){why}: both hand out "
        "the same numbers to different rows",
        "use UUID keys (DEFAULT gen_random_uuid()), or make the sequences disjoint: "
        f"ALTER SEQUENCE {sequence} INCREMENT BY 2 RESTART WITH an odd number above the "
        "highest key on one side and an even one on the other, or go on with "
        "--allow-unsafe if only one side inserts",
        overridable=True,
        kind="generated_key",
    )


def _counter_findings(where: str, facts: TableFacts, counters: Iterable[str]) -> list[Finding]:
    found = []
    for name in counters:
        column = facts.column(name)
        if column is None:
            found.append(
                Finding(
                    where,
                    f"counter column {name} does not exist",
                    "name an existing numeric column (--counter table.column)",
                    kind="counter",
                )
            )
            continue
        if not column.numeric:
            found.append(
                Finding(
                    where,
                    f"counter column {name} is {column.type}, not a number: its changes "
                    "cannot be added up",
                    "mark only smallint, integer, bigint, numeric, real or double precision "
                    "columns as counters",
                    kind="counter",
                )
            )
        if name in facts.primary_key:
            found.append(
                Finding(
                    where,
                    f"counter column {name} is part of the primary key",
                    "a key column cannot be a counter; drop it from --counter",
                    kind="counter",
                )
            )
        if facts.replica_identity != "f" and not facts.may_alter:
            found.append(
                Finding(
                    where,
                    f"counter column {name} needs the old value of each update, which the "
                    "table gives only with REPLICA IDENTITY FULL, and this user may not set it",
                    f"ALTER TABLE {facts.qualified} REPLICA IDENTITY FULL as its owner, or "
                    "drop the counter",
                    kind="counter",
                )
            )
    return found


def counters_by_table(counters: Iterable[str]) -> dict[str, list[str]]:
    """``table.column`` items -> table -> its counter columns (ValueError for a bad one)."""
    found: dict[str, list[str]] = {}
    for item in counters:
        parts = item.strip().split(".")
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"counter {item!r} must be table.column (e.g. accounts.balance)")
        found.setdefault(parts[0], [])
        if parts[1] not in found[parts[0]]:
            found[parts[0]].append(parts[1])
    return found


def _columns_of(index: UniqueIndex) -> str:
    match = re.search(r"\((.*)\)", index.definition)
    return match.group(1) if match else index.definition


def _ident(name: str) -> str:
    return name if re.fullmatch(r"[a-z_][a-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'
