"""What ``crossfeed pair create NAME`` makes, as names and request bodies: no I/O.

A pair joins database A (captured into cluster A, e.g. dc-a) and database B (captured into
B): two Debezium connectors and two ordered feeds, one per direction::

    A --connector NAME-a (Connect-A)--> NAME-a.<schema>.<table> on dc-a
        --feed NAME-a-to-b--> B's database, ?schema=<schema>
    B --connector NAME-b (Connect-B)--> NAME-b.<schema>.<table> on dc-b
        --feed NAME-b-to-a--> A's database, ?schema=<schema>

Each connector's topic prefix and name is ``NAME-a`` / ``NAME-b``, its replication slot
and publication ``crossfeed_NAME_a`` / ``crossfeed_NAME_b`` (crossfeed/cdc/connector.py).
The side names are the clusters' aliases; equal commit times go to the greater one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from crossfeed.core.pair_checks import BOOKKEEPING_TABLES, PAIR_NAME_RE, counters_by_table

FEED_SUFFIXES = ("-a-to-b", "-b-to-a")


@dataclass(frozen=True)
class Side:
    """One side of a pair: its database, its cluster (alias = side name), its Connect."""

    letter: str  # "a" or "b"
    database: str  # postgresql://USER[:PASSWORD]@HOST:PORT/DB
    cluster: str  # the cluster alias Debezium writes to; the side's name
    connect: str  # Kafka Connect's REST URL


@dataclass(frozen=True)
class PairPlan:
    name: str
    a: Side
    b: Side
    schema: str
    tables: tuple[str, ...]  # table names in ``schema``
    counters: tuple[str, ...] = ()  # table.column

    def prefix(self, side: Side) -> str:
        return f"{self.name}-{side.letter}"

    def connector(self, side: Side) -> str:
        """The connector's name on its Connect cluster (the same as its topic prefix)."""
        return self.prefix(side)

    def slot(self, side: Side) -> str:
        """Its replication slot and publication (connector_config's rule)."""
        return "crossfeed_" + re.sub(r"[^a-z0-9_]", "_", self.prefix(side).lower())

    def feed_name(self, source: Side) -> str:
        return feed_names(self.name)[0 if source.letter == "a" else 1]

    def other(self, side: Side) -> Side:
        return self.b if side.letter == "a" else self.a

    @property
    def qualified_tables(self) -> list[str]:
        return [f"{self.schema}.{t}" for t in self.tables]

    def include_list(self) -> list[str]:
        """Debezium's table.include.list: each table as an exact regex (nothing else, never
        crossfeed's own tables)."""
        return [f"{re.escape(self.schema)}\\.{re.escape(t)}" for t in self.tables]

    def topics(self, side: Side) -> list[str]:
        """The feed's topic patterns: exactly this side's connector's table topics."""
        prefix = re.escape(self.prefix(side))
        return [f"{prefix}\\.{re.escape(self.schema)}\\.{re.escape(t)}" for t in self.tables]

    def feed_body(self, source: Side) -> dict[str, Any]:
        """The changefeed (the body of ``PUT /v1/changefeeds/NAME``) from ``source`` into
        the other side's database."""
        target = self.other(source)
        config = {
            "debezium.topic.prefix": self.prefix(source),
            "active_active.pair": self.name,
            "active_active.side": source.cluster,
            "active_active.target_side": target.cluster,
        }
        if self.counters:
            config["active_active.counters"] = ",".join(self.counters)
        return {
            "name": self.feed_name(source),
            "source": source.cluster,
            "sink-uri": f"{target.database}?schema={quote(self.schema, safe='')}",
            "mode": "ordered",
            "input": "debezium",
            "topics": self.topics(source),
            "config": config,
        }


def feed_names(pair: str) -> tuple[str, str]:
    """The pair's two feeds: A into B's database, B into A's."""
    return (pair + FEED_SUFFIXES[0], pair + FEED_SUFFIXES[1])


def check_name(name: str) -> str:
    if not PAIR_NAME_RE.match(name):
        raise ValueError(
            f"pair name {name!r} must be 1-50 lowercase letters, digits or '-', starting with a "
            "letter or digit (it names the feeds NAME-a-to-b, NAME-b-to-a and the connectors' "
            "topic prefixes NAME-a, NAME-b)"
        )
    return name


def check_database(uri: str, flag: str) -> str:
    """A database URI a connector and a sink URI can both be made of."""
    if not re.match(r"^postgres(ql)?://[^/?#]+/[^/?#]+$", uri):
        raise ValueError(
            f"{flag} must look like postgresql://USER[:PASSWORD]@HOST:PORT/DB (no ?options): "
            f"got {_masked(uri)!r}"
        )
    return uri.replace("postgres://", "postgresql://", 1)


def split_tables(tables: list[str], default_schema: str) -> tuple[str, list[str]]:
    """``schema.table`` (or ``table``: in ``default_schema``) items -> the one schema and
    the table names in order; ValueError for several schemas or a bookkeeping table."""
    schemas: list[str] = []
    names: list[str] = []
    for item in tables:
        parts = item.strip().split(".")
        if len(parts) == 1:
            parts = [default_schema, parts[0]]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"--table {item!r} must be schema.table")
        schema, table = parts
        if table in BOOKKEEPING_TABLES:
            raise ValueError(f"--table {item!r} is crossfeed's own bookkeeping; leave it out")
        if schema not in schemas:
            schemas.append(schema)
        if table not in names:
            names.append(table)
    if len(schemas) > 1:
        raise ValueError(
            f"a pair's tables are in one schema (its feeds write ?schema=S); got "
            f"{', '.join(schemas)}: make one pair per schema"
        )
    if not names:
        raise ValueError("name the tables (--table schema.table, repeatable) or --all-tables")
    return schemas[0], names


def check_counters(counters: list[str], tables: list[str]) -> tuple[str, ...]:
    """``table.column`` items, each of a table of the pair (ValueError otherwise)."""
    by_table = counters_by_table(counters)
    for table in by_table:
        if table not in tables:
            raise ValueError(
                f"counter table {table!r} is not one of the pair's tables ({', '.join(tables)})"
            )
    return tuple(f"{t}.{c}" for t, columns in by_table.items() for c in columns)


def pair_of_feed(config: dict[str, Any]) -> str | None:
    """The pair a feed (its stored config, by alias) is one direction of."""
    value = config.get("active_active.pair")
    return str(value) if value else None


def tables_of_topics(topics: list[str], prefix: str, schema: str) -> list[str]:
    """The tables of a pair feed's topic patterns (as :meth:`PairPlan.topics` writes them
    for ``schema``, the feed's ``?schema=``); ValueError for a pattern it did not write."""
    head = f"{re.escape(prefix)}\\.{re.escape(schema)}\\."
    names = []
    for topic in topics:
        escaped = topic[len(head) :]
        table = re.sub(r"\\(.)", r"\1", escaped)
        if not topic.startswith(head) or re.escape(table) != escaped:
            raise ValueError(
                f"topic pattern {topic!r} is not one of pair prefix {prefix!r}, schema {schema!r}"
            )
        names.append(table)
    return names


def _masked(uri: str) -> str:
    return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", uri)
