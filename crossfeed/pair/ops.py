"""``crossfeed pair create|status|remove``, run by the coordinator (``/v1/pairs``).

**create** checks both databases (track_commit_timestamp on, wal_level logical, the user
may replicate and use replication origins; every table on both sides with the same
primary key) and what makes them unsafe (crossfeed/core/pair_checks.py), adds the pair's
SQL to both (crossfeed/pair/sql.py: its tables and functions, each table's hidden columns
and triggers, ``REPLICA IDENTITY FULL`` for tables with counters), registers a Debezium
connector on each side's Connect (its tables only) and creates the two ordered feeds
through the coordinator (crossfeed/core/pair_plan.py). Every step is idempotent: the same
command again changes nothing, and one that stopped part way finishes.

**status** reads both feeds (state, consistency_ts, lag), both connectors and the
findings of both databases again. **remove** removes both feeds and both connectors, and
says what stays: the replication slots and publications (with the SQL that drops them),
the replication origins the sinks made, the hidden columns and triggers (``drop_hidden``
removes those), the pair's own tables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol
from urllib.parse import parse_qs, urlparse

from pydantic import BaseModel, ConfigDict, Field

from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.config.settings import resolve_references
from crossfeed.core import pair_plan
from crossfeed.core.pair_checks import (
    BOOKKEEPING_TABLES,
    Finding,
    Findings,
    check_pair,
    check_server,
)
from crossfeed.core.pair_plan import PairPlan, Side
from crossfeed.core.secrets import SecretError, mask_text
from crossfeed.extras import missing_message
from crossfeed.pair import catalog, sql


class PairError(ValueError):
    """The pair cannot be made (or read); ``lines``: one per reason, each with its fix."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = lines


class PairNotFound(LookupError):
    pass


class FeedControl(Protocol):
    """The coordinator's feeds, as a pair uses them."""

    def put_feed(self, body: dict[str, Any]) -> str:
        """Create or update a feed (``PUT /v1/changefeeds/NAME``): created, updated or
        unchanged."""
        ...

    def feed(self, name: str) -> dict[str, Any] | None:
        """``{"feed": FeedInfo, "status": FeedStatusInfo}`` as JSON, None if there is no
        (unremoved) feed of that name."""
        ...

    def remove_feed(self, name: str) -> None: ...


class PairRequest(BaseModel):
    """The body of ``POST /v1/pairs`` (the options of ``crossfeed pair create``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="the pair: feeds NAME-a-to-b, NAME-b-to-a")
    a_database: str = Field(description="postgresql://USER[:PASSWORD]@HOST:PORT/DB of side A")
    b_database: str = Field(description="postgresql://USER[:PASSWORD]@HOST:PORT/DB of side B")
    tables: list[str] = Field(default_factory=list, description="schema.table, or table")
    all_tables: bool = Field(False, description="every table of `schema` on either side")
    schema_name: str = Field("public", alias="schema", description="with all_tables")
    counters: list[str] = Field(default_factory=list, description="table.column")
    allow_unsafe: bool = Field(False, description="go on past unique indexes, generated keys")
    a_cluster: str = Field("dc-a", description="side A's cluster alias (and side name)")
    b_cluster: str = Field("dc-b", description="side B's cluster alias (and side name)")
    connect_a: str = Field(description="Kafka Connect REST URL writing to a_cluster")
    connect_b: str = Field(description="Kafka Connect REST URL writing to b_cluster")
    snapshot: Literal["initial", "no_data"] = Field(
        "initial", description="Debezium's snapshot.mode: copy existing rows first, or not"
    )


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise PairError(
            [missing_message("postgres", "an active-active pair (on the coordinator)", ["psycopg"])]
        ) from None
    return psycopg


@contextlib.contextmanager
def _connected(uri: str, what: str) -> Iterator[Any]:
    psycopg = _psycopg()
    try:
        # a ${env:}/${file:} password is read here, as the sink and Connect's workers read it
        conn = psycopg.connect(resolve_references(uri, what), autocommit=True, connect_timeout=10)
    except SecretError as err:
        raise PairError([f"{what}: {err}"]) from None
    except psycopg.Error as err:
        message = f"{what}: cannot connect to {uri}: {_first_line(err)}"
        raise PairError([mask_text(message)]) from None
    with conn:
        yield conn


def plan_of(request: PairRequest, listed: list[str] | None = None) -> PairPlan:
    """The pair as named in ``request``; ``listed``: the tables all_tables found (until
    then such a plan has none). PairError naming what is wrong."""
    try:
        name = pair_plan.check_name(request.name)
        a_db = pair_plan.check_database(request.a_database, "--a-database")
        b_db = pair_plan.check_database(request.b_database, "--b-database")
        if _same_database(a_db, b_db):
            raise ValueError("--a-database and --b-database name the same database")
        if request.a_cluster == request.b_cluster:
            raise ValueError("--a-cluster and --b-cluster must differ (each side its own)")
        if request.all_tables and request.tables:
            raise ValueError("give --table ... or --all-tables, not both")
        names: list[str] = []
        counters: tuple[str, ...] = ()
        if listed is None and request.all_tables:
            schema = request.schema_name
        else:
            tables = request.tables if listed is None else listed
            schema, names = pair_plan.split_tables(tables, request.schema_name)
            counters = pair_plan.check_counters(request.counters, names)
        for db in (a_db, b_db):  # a password only by reference (crossfeed/cdc/connector.py)
            connector.connector_config(db, "p")
    except ValueError as err:
        raise PairError([mask_text(str(err))]) from None
    return PairPlan(
        name,
        Side("a", a_db, request.a_cluster, request.connect_a.rstrip("/")),
        Side("b", b_db, request.b_cluster, request.connect_b.rstrip("/")),
        schema,
        tuple(names),
        counters,
    )


def create(request: PairRequest, feeds: FeedControl, say: Callable[[str], None]) -> dict[str, Any]:
    """Make the pair (module docstring); ``say`` hears each step. Returns what was done and
    the findings gone past (``allow_unsafe``); PairError lists every refusal."""
    plan = plan_of(request)  # names and URIs, before connecting anywhere
    with (
        _connected(plan.a.database, plan.a.cluster) as conn_a,
        _connected(plan.b.database, plan.b.cluster) as conn_b,
    ):
        conns = {"a": conn_a, "b": conn_b}
        if request.all_tables:
            listed = sorted(
                set(catalog.schema_tables(conn_a, request.schema_name))
                | set(catalog.schema_tables(conn_b, request.schema_name))
            )
            if not listed:
                raise PairError(
                    [
                        f"schema {request.schema_name} has no tables on either side; create them "
                        "on both sides first"
                    ]
                )
            plan = plan_of(request, [f"{request.schema_name}.{t}" for t in listed])
        findings = _findings(plan, conns)
        blocking = findings.blocking(request.allow_unsafe)
        if blocking:
            tail = (
                " (--allow-unsafe goes on past unique indexes and generated keys)"
                if any(f.overridable for f in blocking)
                else ""
            )
            raise PairError(
                [f"pair {plan.name} refused: {len(blocking)} finding(s){tail}"]
                + [f.line() for f in blocking]
            )
        done = [f"warning: {f.line()}" for f in findings.warnings]
        for side in (plan.a, plan.b):
            try:
                _install_sql(plan, side, conns[side.letter], say)
                done.append(
                    f"{side.cluster}: hidden columns and triggers on "
                    f"{', '.join(plan.qualified_tables)}"
                )
            except _psycopg().Error as err:
                raise PairError(
                    [
                        f"{side.cluster}: the pair's SQL failed (nothing of it was kept on this "
                        f"side): {_first_line(err)}"
                    ]
                    + [f"done before: {d}" for d in done]
                ) from None
    for side in (plan.a, plan.b):
        config = connector.connector_config(
            side.database,
            plan.prefix(side),
            tables=plan.include_list(),
            snapshot_mode=request.snapshot,
        )
        try:
            connector.register(side.connect, plan.connector(side), config)
        except ConnectError as err:
            raise PairError([mask_text(str(err))] + [f"done before: {d}" for d in done]) from None
        line = (
            f"connector {plan.connector(side)} on {side.connect}: {side.cluster} topics "
            f"{plan.prefix(side)}.{plan.schema}.<table>, slot {plan.slot(side)}"
        )
        say(line)
        done.append(line)
    for side in (plan.a, plan.b):
        body = plan.feed_body(side)
        outcome = feeds.put_feed(body)
        line = (
            f"feed {body['name']} {outcome}: {side.cluster} -> {plan.other(side).cluster}'s "
            f"database, schema {plan.schema}"
        )
        say(line)
        done.append(line)
    return {
        "pair": plan.name,
        "feeds": list(pair_plan.feed_names(plan.name)),
        "connectors": {
            plan.a.cluster: plan.connector(plan.a),
            plan.b.cluster: plan.connector(plan.b),
        },
        "tables": plan.qualified_tables,
        "counters": list(plan.counters),
        "warnings": [f.line() for f in findings.warnings],
        "done": [mask_text(d) for d in done],
    }


def _findings(plan: PairPlan, conns: dict[str, Any]) -> Findings:
    found: list[Finding] = []
    for side in (plan.a, plan.b):
        found += check_server(catalog.server_facts(conns[side.letter], side.cluster))
    counters: dict[str, list[str]] = {}
    for item in plan.counters:
        table, column = item.split(".")
        counters.setdefault(table, []).append(column)
    for table in plan.tables:
        facts_a = catalog.table_facts(conns["a"], plan.schema, table)
        facts_b = catalog.table_facts(conns["b"], plan.schema, table)
        found += check_pair(
            facts_a, facts_b, plan.a.cluster, plan.b.cluster, counters.get(table, [])
        )
    return Findings(found)


def _install_sql(plan: PairPlan, side: Side, conn: Any, say: Callable[[str], None]) -> None:
    """The pair's SQL on one side, in one transaction."""
    counter_tables = {c.split(".")[0] for c in plan.counters}
    with conn.transaction():
        for statement in sql.schema_ddl(plan.schema):
            conn.execute(statement)
        for table in plan.tables:
            key = catalog.table_facts(conn, plan.schema, table).primary_key
            for statement in sql.table_ddl(plan.schema, table, key):
                conn.execute(statement)
            if table in counter_tables:
                target = sql.qualified(plan.schema, table)
                conn.execute(f"ALTER TABLE {target} REPLICA IDENTITY FULL")
    say(f"{side.cluster}: the pair's SQL in schema {plan.schema}")


# -- status, remove -------------------------------------------------------------------------


def _stored(name: str, feeds: FeedControl) -> dict[str, dict[str, Any] | None]:
    try:
        pair_plan.check_name(name)
    except ValueError as err:
        raise PairError([str(err)]) from None
    found = {feed: feeds.feed(feed) for feed in pair_plan.feed_names(name)}
    if not any(found.values()):
        raise PairNotFound(
            f"no pair named {name!r}: neither {' nor '.join(found)} exists "
            "(create it with 'crossfeed pair create')"
        )
    return found


def plan_from_feeds(
    name: str, stored: dict[str, dict[str, Any] | None], connect_a: str, connect_b: str
) -> PairPlan | None:
    """The pair as its feeds describe it (None when one is gone and the other does not
    say enough)."""
    a_to_b, b_to_a = (stored.get(n) for n in pair_plan.feed_names(name))
    if a_to_b is None and b_to_a is None:
        return None
    any_feed = (a_to_b or b_to_a or {})["feed"]
    config = any_feed["config"]
    prefix = config.get("debezium.topic.prefix") or f"{name}-{'a' if a_to_b else 'b'}"
    schema = parse_qs(urlparse(any_feed["sink_uri"]).query).get("schema", ["public"])[0]
    tables = pair_plan.tables_of_topics(any_feed["topics"], prefix, schema)
    side_a = config["active_active.side"] if a_to_b else config["active_active.target_side"]
    side_b = config["active_active.target_side"] if a_to_b else config["active_active.side"]
    a_db = _database_of(b_to_a["feed"]["sink_uri"]) if b_to_a else ""
    b_db = _database_of(a_to_b["feed"]["sink_uri"]) if a_to_b else ""
    counters = tuple(c for c in (config.get("active_active.counters") or "").split(",") if c)
    return PairPlan(
        name,
        Side("a", a_db, side_a, connect_a.rstrip("/")),
        Side("b", b_db, side_b, connect_b.rstrip("/")),
        schema,
        tuple(tables),
        counters,
    )


def status(name: str, feeds: FeedControl, connect_a: str, connect_b: str) -> dict[str, Any]:
    """Both directions (state, consistency_ts, lag), both connectors, and the findings of
    both databases as they are now."""
    stored = _stored(name, feeds)
    plan = plan_from_feeds(name, stored, connect_a, connect_b)
    directions = []
    for feed_name, detail in stored.items():
        if detail is None:
            directions.append({"feed": feed_name, "state": "missing"})
            continue
        st = detail["status"]
        directions.append(
            {
                "feed": feed_name,
                "source": detail["feed"]["source"],
                "state": st["state"],
                "consistency_ts_us": st["consistency_ts_us"],
                "lag_s": st["lag_s"],
                "last_error": st.get("last_error") or detail["feed"].get("last_error"),
            }
        )
    connectors = []
    findings: list[str] = []
    if plan is not None:
        for side in (plan.a, plan.b):
            connectors.append(_connector_state(plan, side))
        findings = _current_findings(plan)
    return {
        "pair": name,
        "directions": directions,
        "connectors": connectors,
        "tables": plan.qualified_tables if plan else [],
        "counters": list(plan.counters) if plan else [],
        "findings": findings,
    }


def _connector_state(plan: PairPlan, side: Side) -> dict[str, Any]:
    name = plan.connector(side)
    where = {"connector": name, "side": side.cluster, "connect": side.connect}
    if not side.connect:
        return where | {"state": "not asked (no Connect URL given)"}
    try:
        found = connector.status(side.connect, name)
    except ConnectError as err:
        return where | {"state": "unknown", "error": mask_text(str(err))}
    tasks = [str(t.get("state")) for t in found.get("tasks", [])]
    state = str(found.get("connector", {}).get("state", "?"))
    return where | {"state": state, "tasks": tasks}


def _current_findings(plan: PairPlan) -> list[str]:
    if not (plan.a.database and plan.b.database):
        return ["one direction's feed is gone: the databases are not both known"]
    try:
        with (
            _connected(plan.a.database, plan.a.cluster) as conn_a,
            _connected(plan.b.database, plan.b.cluster) as conn_b,
        ):
            return [f.line() for f in _findings(plan, {"a": conn_a, "b": conn_b}).items]
    except PairError as err:
        return err.lines
    except _psycopg().Error as err:
        return [f"the findings could not be read: {_first_line(err)}"]


def remove(
    name: str, feeds: FeedControl, connect_a: str, connect_b: str, drop_hidden: bool = False
) -> dict[str, Any]:
    """Remove both feeds and both connectors; what was removed and what stays behind,
    each with the SQL that removes it."""
    stored = _stored(name, feeds)
    plan = plan_from_feeds(name, stored, connect_a, connect_b)
    removed: list[str] = []
    left: list[str] = []
    for feed_name, detail in stored.items():
        if detail is not None:
            feeds.remove_feed(feed_name)
            removed.append(f"feed {feed_name}")
    if plan is None:  # pragma: no cover - _stored found a feed
        return {"pair": name, "removed": removed, "left_behind": left}
    for side in (plan.a, plan.b):
        removed_connector = _remove_connector(plan, side)
        (removed if removed_connector.startswith("connector") else left).append(removed_connector)
    for side in (plan.a, plan.b):
        if not side.database:
            left.append(
                f"{side.cluster}: its database is not known (its feed was gone): its slot "
                f"{plan.slot(side)}, publication {plan.slot(side)} and hidden columns stay"
            )
            continue
        found, dropped = _left_in_database(plan, side, drop_hidden)
        left += found
        removed += dropped
    return {"pair": name, "removed": removed, "left_behind": [mask_text(x) for x in left]}


def _remove_connector(plan: PairPlan, side: Side) -> str:
    name = plan.connector(side)
    if not side.connect:
        return f"{side.cluster}: connector {name} (no Connect URL given): remove it there"
    try:
        connector.remove(side.connect, name)
    except ConnectError as err:
        if "HTTP 404" in str(err):
            return f"connector {name} on {side.connect} (was not registered)"
        return f"{side.cluster}: connector {name} on {side.connect}: {mask_text(str(err))}"
    return f"connector {name} on {side.connect}"


def _left_in_database(plan: PairPlan, side: Side, drop_hidden: bool) -> tuple[list[str], list[str]]:
    """What the pair leaves in one side's database; with ``drop_hidden`` the tables'
    hidden columns and triggers are dropped (and said to be)."""
    where = f"{side.cluster} ({_where(side.database)})"
    slot = plan.slot(side)
    other_feed = plan.feed_name(plan.other(side))  # the feed whose sink writes here
    left: list[str] = []
    dropped: list[str] = []
    try:
        with _connected(side.database, side.cluster) as conn:
            row = conn.execute(
                "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
            ).fetchone()
            if row is not None:
                left.append(
                    f"{where}: replication slot {slot} (it keeps WAL until dropped"
                    f"{', still active: its connector is stopping' if row[0] else ''}): "
                    f"SELECT pg_drop_replication_slot({sql.literal(slot)})"
                )
            if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (slot,)).fetchone():
                left.append(f"{where}: publication {slot}: DROP PUBLICATION {sql.ident(slot)}")
            origin = sql.origin(other_feed)
            if conn.execute(
                "SELECT 1 FROM pg_replication_origin WHERE roname = %s", (origin,)
            ).fetchone():
                # Each origin holds one of the server's max_replication_slots states for
                # good: dropped here unless its sink still runs.
                try:
                    with conn.transaction():
                        conn.execute("SELECT pg_replication_origin_drop(%s)", (origin,))
                    dropped.append(f"{where}: replication origin {origin}")
                except Exception as err:  # psycopg's, imported lazily (_psycopg)
                    left.append(
                        f"{where}: replication origin {origin} ({_first_line(err)}): "
                        f"SELECT pg_replication_origin_drop({sql.literal(origin)})"
                    )
            for table in plan.tables:
                statements = sql.remove_ddl(plan.schema, table)
                if drop_hidden:
                    with conn.transaction():
                        for statement in statements:
                            conn.execute(statement)
                    dropped.append(f"{where}: hidden columns and triggers of {plan.schema}.{table}")
                else:
                    left.append(
                        f"{where}: hidden columns and triggers of {plan.schema}.{table} "
                        f"(--drop-hidden drops them with the pair): {'; '.join(statements)}"
                    )
            counter_tables = sorted({c.split(".")[0] for c in plan.counters})
            if counter_tables:
                left.append(
                    f"{where}: REPLICA IDENTITY FULL on "
                    f"{', '.join(f'{plan.schema}.{t}' for t in counter_tables)} (the counters' "
                    "old values): "
                    + "; ".join(
                        f"ALTER TABLE {sql.qualified(plan.schema, t)} REPLICA IDENTITY DEFAULT"
                        for t in counter_tables
                    )
                )
            left.append(_bookkeeping(conn, plan.schema, where))
    except PairError as err:
        left += [f"{where}: {line}" for line in err.lines]
    except _psycopg().Error as err:
        left.append(f"{where}: stopped reading what is left: {_first_line(err)}")
    return left, dropped


def _bookkeeping(conn: Any, schema: str, where: str) -> str:
    """The line naming crossfeed's own tables and functions left in ``schema`` (the
    conflict record among them), with the SQL that drops them."""
    tables = [
        str(r[0])
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = ANY(%s) ORDER BY c.relname",
            (schema, sorted(BOOKKEEPING_TABLES)),
        ).fetchall()
    ]
    functions = [
        str(r[0])
        for r in conn.execute(
            "SELECT format('%%I.%%I(%%s)', n.nspname, p.proname, "
            "pg_get_function_identity_arguments(p.oid)) FROM pg_proc p "
            "JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s AND p.proname LIKE 'crossfeed\\_%%' ORDER BY 1",
            (schema,),
        ).fetchall()
    ]
    statements = []
    if tables:
        statements.append("DROP TABLE " + ", ".join(sql.qualified(schema, t) for t in tables))
    if functions:
        statements.append(
            "DROP FUNCTION " + ", ".join(functions) + " (once no table of the schema has the "
            "triggers)"
        )
    return (
        f"{where}: crossfeed's tables ({', '.join(tables) or 'none'}) and functions in "
        f"schema {schema}, the conflict record among them: {'; '.join(statements) or '-'}"
    )


def _database_of(sink_uri: str) -> str:
    return sink_uri.split("?", 1)[0]


def _where(uri: str) -> str:
    parsed = urlparse(uri)
    return f"{parsed.hostname}:{parsed.port or 5432}{parsed.path}"


def _same_database(a: str, b: str) -> bool:
    pa, pb = urlparse(a), urlparse(b)
    return (pa.hostname, pa.port or 5432, pa.path) == (pb.hostname, pb.port or 5432, pb.path)


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]
