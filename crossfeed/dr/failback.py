"""``crossfeed failback --feed F --source-database URI``, for a database feed after a
failover (docs/disaster-recovery.md): bring the old primary S back, equal to the new
one T, and (unless told otherwise) switch the direction back to S with nothing lost.

1. Check: F was failed over (T's position row says so), both databases answer, T can be
   captured. S is frozen (read-only, client sessions ended): nothing writes to it now.
2. **List the divergent tail before touching anything.** A logical decoding message is put
   into S's WAL; once Debezium (F's connector, on the source side's Connect) has written
   it to ``<prefix>.message``, every change S committed before it is in the source side's
   Kafka. The transactions after the last one T applied (commit LSN order) that touched
   F's tables are read there — Debezium's transaction topic and data events — and kept in
   ``<schema>.crossfeed_divergent`` on S, a row per change: xid, commit LSN and time,
   table, operation, key, and the row before and after (Debezium's JSON encoding).
3. F's connector is removed from the source side, its slot and publication dropped on S,
   and F retired (the coordinator removes it: the switch back makes a new forward feed).
4. **Re-seed:** the reverse capture is made on T (publication, then slot: from here T's
   writes are kept), then S's tables are made equal to one snapshot of T's taken after it
   — what differs only (``database.reseed``). Changes T committed between the slot and
   the snapshot reach S again through the reverse feed; applying them in order ends at
   the same rows.
5. The reverse connector (no snapshot) and feed R (T into S) are created; R's puller,
   sorter and sink are the operator's to start, like any feed's.
6. ``switch_back``: failback waits until R's consistency_ts on S passes the moment it
   started waiting (S caught up), then switches R over (``switchover.run``): T frozen,
   drained, compared by digest, and a new forward feed from S — S is the primary again,
   RPO 0. Without it, ``crossfeed switchover --feed R`` does that step when you choose.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from crossfeed import fencing
from crossfeed.cdc import connect_api, connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.core import takeover
from crossfeed.core.divergence import DivergentTxn, TailEnd, TailEvent, divergent
from crossfeed.dr import database, switchover
from crossfeed.dr.switchover import Feeds, Plan, SwitchoverReport, SwitchoverRequest
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import scan
from crossfeed.wire import debezium
from crossfeed.wire.debezium import NotDebezium

TAIL_TABLE = "crossfeed_divergent"
MARKER_PREFIX = "crossfeed-failback"
LOOKBACK_MS = 300_000
"""The tail is read from this long before T's consistency_ts (by record time)."""


class FailbackError(ValueError):
    """The failback cannot go on: one line per reason."""


class FailbackRequest(BaseModel):
    """The body of ``POST /v1/failback`` for a database feed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    feed: str
    source_database: str = Field(description="the old primary (the feed's captured database)")
    source_connect: str = Field(description="Kafka Connect running the feed's connector")
    reverse_connect: str = Field(description="Kafka Connect on the new primary's side")
    reverse_cluster: str = Field("", description="the cluster reverse_connect writes to")
    source_connector: str = Field("", description="the feed's connector (default: its prefix)")
    reverse_name: str = Field("", description="the reverse feed's name (default: F-r1, ...)")
    catch_up_timeout_s: float = Field(600.0, gt=0)
    marker_timeout_s: float = Field(180.0, gt=0)
    switch_back: bool = Field(
        False,
        description="wait until the reverse feed caught up (its puller, sorter and sink "
        "must be running) and switch the direction back",
    )


class DivergentSummary(BaseModel):
    xid: str
    commit_lsn: int
    commit_ts_us: int
    tables: list[str]
    changes: int


class FailbackReport(BaseModel):
    kind: str = "failback"
    feed: str
    reverse_feed: str
    consistency_ts_us: int = Field(description="what the new primary held of the old one")
    divergent_transactions: int
    divergent_changes: int
    kept_in: str = Field(description="the table on the old primary listing them, a row per change")
    divergent: list[DivergentSummary] = Field(description="the first 100, in commit order")
    reseeded: list[dict[str, Any]] = Field(description="per table: rows deleted, rows written")
    removed: list[str]
    caught_up_s: float | None = Field(description="the reverse feed's catch-up (switch_back)")
    switchover: SwitchoverReport | None
    took_s: float
    notes: list[str]


def run(
    request: FailbackRequest,
    feeds: Feeds,
    staging_alias: Callable[[FeedSpec], str],
    cluster_conf: Callable[[str], dict[str, Any]],
    say: Callable[[str], None] = lambda _line: None,
) -> FailbackReport:
    started = time.monotonic()
    spec = feeds.spec(request.feed)
    if spec is None:
        raise FailbackError(f"no feed {request.feed!r}")
    plan = Plan(request, spec, staging_alias(spec))
    with (
        database.connect(plan.source_dsn) as source,
        database.connect(plan.target_dsn) as target,
    ):
        tables, problems = switchover.check(plan, request.reverse_connect, source, target)
        fenced = _failed_over(target, plan)
        if fenced is None:
            problems.append(
                f"feed {plan.feed} was not failed over (no failed_over_at on the target): "
                "use crossfeed switchover for a planned change of direction"
            )
        if problems:
            raise FailbackError("\n".join(problems))
        assert fenced is not None
        consistency, applied_lsn = fenced
        frozen = database.freeze(source)
        say(f"froze {plan.source_masked} ({frozen.sessions_ended} sessions ended)")
        txns = _tail(plan, request, spec, source, cluster_conf, applied_lsn, consistency, tables)
        kept_in = _keep(source, plan, txns)
        say(f"divergent tail: {len(txns)} transactions, kept in {kept_in}")
        removed = switchover.remove_forward(plan, request.source_connect, source)
        feeds.retire(plan.feed)  # it cannot run again; its target gets the reverse's reverse
        slot_lsn = database.make_capture(target, plan.reverse_slot, plan.target_schema, tables)
        reseeded = database.reseed(
            source, plan.source_schema, plan.target_dsn, plan.target_schema, tables
        )
        say("re-seeded: " + ", ".join(f"{r.table} -{r.deleted} +{r.written}" for r in reseeded))
        notes = [
            switchover.start_reverse(plan, request.reverse_connect, feeds, tables),
            f"reverse capture from {slot_lsn}",
        ]
        caught_up_s = None
        if request.switch_back:
            waiting = time.monotonic()
            _catch_up(plan, feeds, source, target, request.catch_up_timeout_s)
            caught_up_s = round(time.monotonic() - waiting, 3)
            say(f"{plan.reverse_name} caught up in {caught_up_s:.1f}s")
    back = None
    if request.switch_back:
        reverse_spec = feeds.spec(plan.reverse_name)
        assert reverse_spec is not None
        back = switchover.run(
            SwitchoverRequest(
                feed=reverse_spec.name,
                source_database=plan.target_uri,
                source_connect=request.reverse_connect,
                reverse_connect=request.source_connect,
                reverse_cluster=spec.source,
                source_connector="",
                reverse_name="",
                drain_timeout_s=request.catch_up_timeout_s,
            ),
            feeds,
            staging_alias,
            say,
        )
    return FailbackReport(
        feed=spec.name,
        reverse_feed=plan.reverse_name,
        consistency_ts_us=consistency,
        divergent_transactions=len(txns),
        divergent_changes=sum(len(t.changes) for t in txns),
        kept_in=kept_in,
        divergent=[
            DivergentSummary(
                xid=t.xid,
                commit_lsn=t.commit_lsn,
                commit_ts_us=t.commit_ts_us,
                tables=list(t.tables),
                changes=len(t.changes),
            )
            for t in txns[:100]
        ],
        reseeded=[{"table": r.table, "deleted": r.deleted, "written": r.written} for r in reseeded],
        removed=removed,
        caught_up_s=caught_up_s,
        switchover=back,
        took_s=round(time.monotonic() - started, 3),
        notes=notes,
    )


def _failed_over(target: database.Conn, plan: Plan) -> tuple[int, int] | None:
    """(consistency_ts, applied commit LSN) of a failed-over feed's target, else None."""
    table = f'"{plan.target_schema}".{fencing.POSITION_TABLE}'
    if target.execute("SELECT to_regclass(%s)", (table,)).fetchone() == (None,):
        return None
    row = target.execute(
        f'SELECT commit_ts, txn, checkpoint_ts, failed_over_at IS NOT NULL FROM "'
        f'{plan.target_schema}".{fencing.POSITION_TABLE} WHERE feed = %s',
        (plan.feed,),
    ).fetchone()
    if row is None or not row[3]:
        return None
    lsn = takeover.debezium_order(str(row[1]))
    return takeover.consistency_of(int(row[0]), int(row[2])), -1 if lsn is None else lsn


def _tail(
    plan: Plan,
    request: FailbackRequest,
    spec: FeedSpec,
    source: database.Conn,
    cluster_conf: Callable[[str], dict[str, Any]],
    applied_lsn: int,
    consistency_us: int,
    tables: list[str],
) -> list[DivergentTxn]:
    """The divergent transactions, read from the source side's Kafka once Debezium has
    delivered everything S committed (a marker message after the freeze)."""
    conf = cluster_conf(spec.source)
    if not scan.answers(conf):
        raise FailbackError(
            f"{spec.source} does not answer: the divergent tail is read from what Debezium "
            "captured there; bring that cluster back first (nothing was changed but the "
            "source's freeze)"
        )
    marker = f"{plan.feed}:{uuid.uuid4().hex}"
    database.emit_marker(source, MARKER_PREFIX, marker)
    since_ms = max(0, consistency_us // 1000 - LOOKBACK_MS)
    deadline = time.monotonic() + request.marker_timeout_s
    message_topic = f"{plan.prefix}.message"
    while not any(
        _is_marker(m, marker)
        for m in scan.records_since(conf, [message_topic], since_ms, "crossfeed-failback-scan")
    ):
        if time.monotonic() > deadline:
            raise FailbackError(
                f"Debezium did not deliver the source's WAL to {spec.source} within "
                f"{request.marker_timeout_s:.0f}s (connector {plan.connector} on "
                f"{request.source_connect}: is it running?); the source stays read-only"
            )
        restart_failed(request.source_connect, plan.connector)
        time.sleep(1.0)
    qualified = {f"{plan.source_schema}.{t}" for t in tables}
    topic_names = [debezium.transaction_topic(plan.prefix)] + [
        debezium.collection_topic(plan.prefix, q) for q in sorted(qualified)
    ]
    ends: list[TailEnd] = []
    events: list[TailEvent] = []
    for msg in scan.records_since(conf, topic_names, since_ms, "crossfeed-failback-scan"):
        if msg.topic() == topic_names[0]:
            ends.extend(_end(msg.value()))
        else:
            events.extend(_event(msg.key(), msg.value()))
    return divergent(ends, events, applied_lsn, qualified)


def _is_marker(msg: Any, marker: str) -> bool:
    try:
        payload = debezium.payload_of(msg.value() or b"")
    except NotDebezium:
        return False
    content = (payload.get("message") or {}).get("content")
    return isinstance(content, str) and base64.b64decode(content) == marker.encode()


def restart_failed(connect_url: str, name: str) -> None:
    """A connector whose task failed while dc-a or the source was away is started again."""
    try:
        tasks = connector.status(connect_url, name).get("tasks", [])
        if not tasks or any(t.get("state") == "FAILED" for t in tasks):
            path = f"/connectors/{name}/restart?includeTasks=true&onlyFailed=true"
            connect_api.request(connect_url, "POST", path)
    except ConnectError:
        pass  # the worker is starting: asked again on the next round


def _end(value: bytes | None) -> Iterator[TailEnd]:
    try:
        end = debezium.txn_record(value)
    except NotDebezium:
        return
    if end is not None:
        yield TailEnd(end.xid, end.lsn, end.ts_us, tuple(c for c, _ in end.collections))


def _event(key: bytes | None, value: bytes | None) -> Iterator[TailEvent]:
    if not value:
        return
    try:
        payload = debezium.payload_of(value)
        key_payload = debezium.payload_of(key) if key else {}
    except NotDebezium:
        return
    block = payload.get("transaction")
    source = payload.get("source") or {}
    if not isinstance(block, dict) or payload.get("op") not in ("c", "u", "d", "t"):
        return  # a snapshot row, a message: never in a streamed transaction's tail
    xid, _, lsn = str(block.get("id", "")).partition(":")
    if not lsn.isdigit():
        return
    yield TailEvent(
        xid,
        int(lsn),
        int(block.get("total_order") or 0),
        f"{source.get('schema')}.{source.get('table')}",
        str(payload["op"]),
        key_payload,
        payload.get("before"),
        payload.get("after"),
    )


def _keep(source: database.Conn, plan: Plan, txns: list[DivergentTxn]) -> str:
    """Write the tail into ``<schema>.crossfeed_divergent`` on S (kept; a failback adds its
    rows under its own ``failback_id``); the table's name."""
    table = f'"{plan.source_schema}".{TAIL_TABLE}'
    run_id = uuid.uuid4().hex[:12]
    with source.transaction():
        source.execute(
            f"CREATE TABLE IF NOT EXISTS {table} (failback_id text NOT NULL, feed text NOT NULL, "
            "xid text NOT NULL, commit_lsn bigint NOT NULL, commit_ts timestamptz NOT NULL, "
            "seq int NOT NULL, tbl text NOT NULL, op text NOT NULL, key jsonb, before jsonb, "
            "after jsonb, listed_at timestamptz NOT NULL DEFAULT now(), "
            "PRIMARY KEY (failback_id, commit_lsn, seq))"
        )
        with source.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} (failback_id, feed, xid, commit_lsn, commit_ts, seq, tbl, "
                "op, key, before, after) VALUES (%s, %s, %s, %s, "
                "to_timestamp(%s / 1e6), %s, %s, %s, %s, %s, %s)",
                [
                    (
                        run_id,
                        plan.feed,
                        t.xid,
                        t.commit_lsn,
                        t.commit_ts_us,
                        n,
                        e.table,
                        e.op,
                        json.dumps(e.key),
                        None if e.before is None else json.dumps(e.before),
                        None if e.after is None else json.dumps(e.after),
                    )
                    for t in txns
                    for n, e in enumerate(t.changes)
                ],
            )
    return f"{plan.source_schema}.{TAIL_TABLE} (failback_id {run_id})"


def _catch_up(
    plan: Plan,
    feeds: Feeds,
    source: database.Conn,
    target: database.Conn,
    timeout_s: float,
) -> None:
    """Until the reverse feed's consistency_ts on S passes T's clock now."""
    now_us = database.now_us(target)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        spec = feeds.spec(plan.reverse_name)
        name = spec.name if spec is not None else plan.reverse_name
        found = switchover.position(source, plan.source_schema, name)
        if found is not None and takeover.consistency_of(found[0], found[2]) >= now_us:
            return
        time.sleep(0.5)
    raise FailbackError(
        f"the reverse feed {plan.reverse_name} did not catch up within {timeout_s:.0f}s: it "
        "runs on; run crossfeed switchover --feed for it once it has"
    )
