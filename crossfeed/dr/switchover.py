"""``crossfeed switchover --feed F``: a planned change of direction with nothing lost
(docs/disaster-recovery.md). F is an ordered feed of a database captured by Debezium
(source S, connector on the source side's Connect) into a PostgreSQL database T.

1. Check what the switchover needs before touching anything: F's target position, T's
   ``wal_level``, the same tables (and keys) on both sides, the reverse side's Connect.
2. Freeze S: read-only for new sessions, every client session ended (``database.freeze``).
   From here applications' writes to S are refused.
3. Drain: wait until T's consistency_ts passes the freeze (T holds every transaction S
   committed), then compare each captured table by digest; equal or the switchover is
   undone (S thawed) and the tables that differ are named.
4. Carry S's sequences over to T (logical decoding does not), retire F (the coordinator
   removes it) and fence it on T.
5. Make the reverse capture on T — publication and slot — while nothing writes to T: the
   slot starts where both databases are equal, so the reverse connector needs no snapshot.
   From here applications may write to T: the write-unavailability ends.
6. Register the reverse connector on the target side's Connect (``snapshot.mode=no_data``)
   and create the reverse feed R from T into S. S stays read-only for applications; R's
   sink writes to it regardless (its sessions are not read-only).
7. Remove F's connector from the source side's Connect, and drop its slot and
   publication on S (a slot nobody reads keeps S's WAL for ever).
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Callable
from typing import Any, Protocol
from urllib.parse import quote

import psycopg
from pydantic import BaseModel, ConfigDict, Field

from crossfeed import fencing
from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.config.settings import resolve_references
from crossfeed.core import switchover as rules
from crossfeed.core import takeover
from crossfeed.core.secrets import mask_text
from crossfeed.dr import database
from crossfeed.feeds import FeedSpec, SinkUri

log = logging.getLogger(__name__)


class SwitchoverError(ValueError):
    """The switchover cannot start (nothing was changed) or was undone: one line per reason."""


class Feeds(Protocol):
    """The feeds as a switchover uses them (the coordinator's, or a test's)."""

    def spec(self, name: str) -> FeedSpec | None: ...

    def retire(self, name: str) -> None:
        """The feed is done for good — its connector and slot are about to go, and a new
        feed takes its target (for the coordinator: remove it; its history stays in the
        target's ``crossfeed_failover``)."""
        ...

    def put_feed(self, body: dict[str, Any]) -> str: ...


class SwitchoverRequest(BaseModel):
    """The body of ``POST /v1/switchover`` (the options of ``crossfeed switchover``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    feed: str
    source_database: str = Field(
        description="postgresql://USER[:PASSWORD]@HOST:PORT/DB the feed captures"
    )
    source_connect: str = Field(description="Kafka Connect REST URL running the feed's connector")
    reverse_connect: str = Field(
        description="Kafka Connect REST URL on the target's side (its Debezium captures the "
        "target database for the reverse feed)"
    )
    reverse_cluster: str = Field(
        "",
        description="the cluster alias reverse_connect writes to (default: the feed's staging "
        "cluster)",
    )
    source_connector: str = Field("", description="the feed's connector (default: its prefix)")
    reverse_name: str = Field("", description="the reverse feed's name (default: F-r1, F-r2, ...)")
    drain_timeout_s: float = Field(120.0, gt=0, description="how long to wait for the drain")


class TableCheck(BaseModel):
    table: str
    rows: int
    md5: str


class SwitchoverReport(BaseModel):
    kind: str = "switchover"
    feed: str
    reverse_feed: str
    source: str = Field(description="the old primary (masked): read-only now, R's target")
    target: str = Field(description="the new primary (masked)")
    sessions_ended: int = Field(description="client sessions of the source ended by the freeze")
    frozen_at_us: int
    consistency_ts_us: int = Field(description="the target's consistency_ts after the drain")
    last_txn: str
    rpo_transactions: int = Field(description="0: checked by the digests below")
    tables: list[TableCheck]
    sequences: list[str] = Field(description="table.column=value set on the new primary")
    reverse_connector: str
    reverse_slot_lsn: str
    writes_refused_s: float = Field(
        description="from the freeze until the new primary's writes were captured"
    )
    took_s: float
    removed: list[str] = Field(description="the old direction's connector, slot, publication")
    notes: list[str]


def run(
    request: SwitchoverRequest,
    feeds: Feeds,
    staging_alias: Callable[[FeedSpec], str],
    say: Callable[[str], None] = lambda _line: None,
) -> SwitchoverReport:
    started = time.monotonic()
    spec = feeds.spec(request.feed)
    if spec is None:
        raise SwitchoverError(f"no feed {request.feed!r}")
    plan = Plan(request, spec, staging_alias(spec))
    with (
        database.connect(plan.source_dsn) as source,
        database.connect(plan.target_dsn) as target,
    ):
        tables, problems = check(plan, request.reverse_connect, source, target)
        if database.is_frozen(source):
            problems.append("the source database is already read-only (a switchover done before?)")
        if problems:
            raise SwitchoverError("\n".join(problems))
        say(f"freezing {plan.source_masked}: read-only, client sessions ended")
        freezing = time.monotonic()
        frozen = database.freeze(source)
        undo_freeze = True  # until the target is fenced, a failure leaves all as it was
        try:
            consistency, last_txn = _drain(plan, target, frozen.frozen_at_us, request)
            on_source, on_target = database.digests(
                source, plan.source_schema, target, plan.target_schema, tables
            )
            deadline = time.monotonic() + request.drain_timeout_s
            while rules.differing(on_source, on_target) and time.monotonic() < deadline:
                time.sleep(1.0)  # the sink's last commit, after the consistency_ts moved
                on_source, on_target = database.digests(
                    source, plan.source_schema, target, plan.target_schema, tables
                )
            differ = rules.differing(on_source, on_target)
            if differ:
                raise SwitchoverError(
                    f"after the drain the tables still differ: {', '.join(differ)} "
                    f"(rows {plan.source_schema}: "
                    + ", ".join(f"{t}={on_source[t].rows}" for t in differ if t in on_source)
                    + f"; {plan.target_schema}: "
                    + ", ".join(f"{t}={on_target[t].rows}" for t in differ if t in on_target)
                    + "); the source is writable again and the feed runs as before"
                )
            say(f"drained: {len(tables)} tables equal at consistency_ts {consistency}")
            sequences = database.carry_sequences(
                source, plan.source_schema, target, plan.target_schema, tables
            )
            position = fencing.fence(plan.target_dsn, plan.target_schema, spec.name)
            undo_freeze = False  # the point of no return: S stays read-only from here
        finally:
            if undo_freeze:
                database.thaw(source)
        try:
            feeds.retire(spec.name)
            slot_lsn = database.make_capture(target, plan.reverse_slot, plan.target_schema, tables)
            if database.is_frozen(target):  # the old primary, back after a failback
                database.thaw(target)
            writable = time.monotonic()
            say(f"{plan.target_masked} takes writes (captured from {slot_lsn})")
            notes = [start_reverse(plan, request.reverse_connect, feeds, tables)]
            removed = remove_forward(plan, request.source_connect, source)
        except (ConnectError, ValueError, TimeoutError, psycopg.Error) as err:
            raise SwitchoverError(
                f"the switchover stopped after the target was fenced ({err}); the source is "
                f"read-only and feed {spec.name} applies nothing: finish by hand as "
                "docs/disaster-recovery.md describes (reverse capture, connector, feed), or "
                "thaw the source and make a new feed"
            ) from err
    report = SwitchoverReport(
        feed=spec.name,
        reverse_feed=plan.reverse_name,
        source=plan.source_masked,
        target=plan.target_masked,
        sessions_ended=frozen.sessions_ended,
        frozen_at_us=frozen.frozen_at_us,
        consistency_ts_us=consistency,
        last_txn=last_txn,
        rpo_transactions=0,
        tables=[TableCheck(table=t, rows=d.rows, md5=d.md5) for t, d in on_target.items()],
        sequences=sequences,
        reverse_connector=plan.reverse_name,
        reverse_slot_lsn=slot_lsn,
        writes_refused_s=round(writable - freezing, 3),
        took_s=round(time.monotonic() - started, 3),
        removed=removed,
        notes=notes,
    )
    _record(plan, position, report)
    log.info(
        "feed %s switched over: %s is the primary, %s follows it through %s; writes refused %.2fs",
        spec.name,
        plan.target_masked,
        plan.source_masked,
        plan.reverse_name,
        report.writes_refused_s,
    )
    return report


class Plan:
    """Names and places, worked out before connecting anywhere."""

    def __init__(self, request: SwitchoverRequest | Any, spec: FeedSpec, staging: str) -> None:
        if spec.mode != "ordered" or spec.config.input != "debezium":
            raise SwitchoverError(
                f"feed {spec.name} is not a Debezium feed (mode {spec.mode}, input "
                f"{spec.config.input}): a switchover reverses a captured database's feed"
            )
        sink = SinkUri.parse(spec.sink_uri)
        if sink.scheme != "postgresql" or sink.dsn is None:
            raise SwitchoverError(
                f"feed {spec.name} writes to {sink.scheme}: a switchover needs a PostgreSQL target"
            )
        self.feed = spec.name
        self.prefix = spec.debezium_prefix()
        self.connector = request.source_connector or self.prefix
        self.publication = connector.slot_name(self.prefix)
        self.target_uri = sink.dsn  # as the feed has it: a password only by reference
        self.target_dsn = resolve_references(sink.dsn, "the sink URI")
        self.target_schema = sink.schema_name or "public"
        self.source_schema = ""  # from the publication (_check)
        self.reverse_name = request.reverse_name or rules.reverse_name(spec.name)
        self.reverse_slot = connector.slot_name(self.reverse_name)
        self.reverse_cluster = request.reverse_cluster or staging
        self.source_uri = request.source_database  # the reverse feed's sink URI, as given
        self.source_dsn = resolve_references(request.source_database, "the source database URI")
        self.source_masked = mask_text(request.source_database)
        self.target_masked = mask_text(self.target_dsn)
        self.spec = spec


def check(
    plan: Plan, reverse_connect: str, source: database.Conn, target: database.Conn
) -> tuple[list[str], list[str]]:
    """The captured tables (one schema), and every reason not to reverse the feed."""
    problems = []
    published = database.published_tables(source, plan.publication)
    schemas = sorted({s for s, _ in published})
    if not published:
        problems.append(
            f"the source has no publication {plan.publication} with tables (the feed's "
            f"connector {plan.connector} makes it): is --source-database the captured database?"
        )
    elif len(schemas) > 1:
        problems.append(f"the captured tables are in several schemas ({', '.join(schemas)})")
    tables = [t for _, t in published]
    plan.source_schema = schemas[0] if schemas else "public"
    if database.wal_level(target) != "logical":
        problems.append(
            f"the target's wal_level is {database.wal_level(target)}: the reverse feed "
            "captures it; set wal_level = logical and restart it"
        )
    for table in tables:
        key = database.primary_key(source, plan.source_schema, table)
        if not database.columns(target, plan.target_schema, table):
            problems.append(f"the target has no table {plan.target_schema}.{table}")
        elif database.primary_key(target, plan.target_schema, table) != key:
            problems.append(f"{table}: the target's primary key is not the source's ({key})")
    if position(target, plan.target_schema, plan.feed) is None:
        problems.append(f"the target holds no position of feed {plan.feed}: it never applied")
    try:  # what registering the reverse connector would refuse, before anything is done
        connector.connector_config(plan.target_uri, plan.reverse_name)
    except ValueError as err:
        problems.append(f"the reverse connector cannot capture the target: {err}")
    try:
        connector.names(reverse_connect)
    except ConnectError as err:
        problems.append(f"the reverse side's Connect does not answer: {err}")
    return tables, problems


def position(conn: database.Conn, schema: str, feed: str) -> tuple[int, str, int] | None:
    with contextlib.suppress(Exception):
        row = conn.execute(
            f'SELECT commit_ts, txn, checkpoint_ts FROM "{schema}".{fencing.POSITION_TABLE} '
            "WHERE feed = %s",
            (feed,),
        ).fetchone()
        return None if row is None or row[0] < 0 else (int(row[0]), str(row[1]), int(row[2]))
    return None


def _drain(
    plan: Plan, target: database.Conn, frozen_at_us: int, request: SwitchoverRequest
) -> tuple[int, str]:
    """Until the target's consistency_ts passes the freeze: (consistency_ts, last txn)."""
    deadline = time.monotonic() + request.drain_timeout_s
    consistency, last_txn = 0, ""
    while time.monotonic() < deadline:
        found = position(target, plan.target_schema, plan.feed)
        if found is not None:
            consistency = takeover.consistency_of(found[0], found[2])
            last_txn = found[1]
            if rules.drained(consistency, frozen_at_us):
                return consistency, last_txn
        time.sleep(0.2)
    raise SwitchoverError(
        f"the target did not drain within {request.drain_timeout_s:.0f}s (consistency_ts "
        f"{consistency}, frozen at {frozen_at_us}): is the feed running? the source is "
        "writable again"
    )


def start_reverse(plan: Plan, reverse_connect: str, feeds: Feeds, tables: list[str]) -> str:
    """The reverse connector (on the slot made for it) and feed; a note for the report."""
    included = [f"{re.escape(plan.target_schema)}\\.{re.escape(t)}" for t in tables]
    config = connector.connector_config(
        plan.target_uri, plan.reverse_name, tables=included, snapshot_mode="no_data"
    )
    connector.register(reverse_connect, plan.reverse_name, config)
    options = plan.spec.config.model_dump(by_alias=True, exclude_none=True)
    options["debezium.topic.prefix"] = plan.reverse_name
    body = {
        "name": plan.reverse_name,
        "source": plan.reverse_cluster,
        "sink-uri": f"{plan.source_uri}?schema={quote(plan.source_schema, safe='')}",
        "mode": "ordered",
        "input": "debezium",
        "topics": [
            f"{re.escape(plan.reverse_name)}\\.{re.escape(plan.target_schema)}\\.{re.escape(t)}"
            for t in tables
        ],
        "config": options,
    }
    answer = feeds.put_feed(body)
    name = plan.reverse_name
    return (
        f"reverse feed {name} {answer}: {plan.reverse_cluster} -> {plan.source_masked}; "
        f"connector {name} on {reverse_connect}; start its services: crossfeed puller run "
        f"--feed {name}, crossfeed sorter run --feed {name}, crossfeed sink run --feed {name}"
    )


def remove_forward(plan: Plan, source_connect: str, source: database.Conn) -> list[str]:
    """Remove the old direction's connector, its slot and its publication on the source."""
    removed = []
    try:
        connector.remove(source_connect, plan.connector)
        removed.append(f"connector {plan.connector} on {source_connect}")
    except ConnectError as err:
        removed.append(f"connector {plan.connector}: not removed ({err}): remove it by hand")
    try:
        removed += database.drop_capture(source, plan.publication)
    except TimeoutError as err:
        removed.append(f"{err}: drop it once its connector is gone")
    return removed


def _record(plan: Plan, position: fencing.Position, report: SwitchoverReport) -> None:
    fencing.record(
        plan.target_dsn,
        plan.target_schema,
        plan.feed,
        position.epoch,
        {
            "failed_over_at_ms": position.failed_over_at_ms,
            "consistency_ts_us": report.consistency_ts_us,
            "last_txn": report.last_txn,
            "last_commit_ts_us": position.commit_ts,
            "rpo": {
                "transactions": 0,
                "exact": True,
                "known_from": "digests of the captured tables",
                "first_lost_us": None,
                "last_lost_us": None,
                "span_s": 0.0,
            },
            **report.model_dump(mode="json"),
        },
    )
