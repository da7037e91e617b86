"""``crossfeed failover --feed F`` for an ordered feed into PostgreSQL
(docs/disaster-recovery.md): the target becomes the primary, at a transaction boundary,
knowing what it holds and what was lost.

1. Stop F: a feed the coordinator runs is set to ``failed_over`` (its puller tasks stop);
   every puller task is fenced on the staging cluster (``fence.py``): what a dead puller
   left open there is aborted, so the feed's copies can be read to their end.
2. Fence the target (``crossfeed/fencing.py``): the sessions of the feed's sinks end, the
   position row's epoch is bumped and it is marked failed over; no sink of F writes to
   the target again. The row says what the target holds: the last source transaction
   applied and consistency_ts — the source's state exactly as of that commit.
3. The RPO (``crossfeed/core/takeover.py``): the source transactions known to have
   committed after it. Read from the source cluster when it answers (a Debezium feed's
   transaction topic, a change producer's topics): exact. Else from the feed's copies on
   the staging cluster: at least that many.
4. The report, also as a row of ``S.crossfeed_failover`` on the target.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from fastapi import HTTPException
from pydantic import BaseModel, Field

from crossfeed.config.settings import resolve_references
from crossfeed.core import takeover
from crossfeed.core.secrets import mask_text
from crossfeed.extras import MissingExtra, require
from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.failover import known
from crossfeed.services.coordinator.failover.fence import fence_pullers
from crossfeed.services.coordinator.failover.hooks import FailoverHooks
from crossfeed.wire import topics

log = logging.getLogger(__name__)


class RpoReport(BaseModel):
    transactions: int = Field(description="source transactions committed and not applied")
    exact: bool = Field(description="false: at least this many (the source did not answer)")
    known_from: str
    first_lost_us: int | None = Field(description="commit time of the first one lost, µs")
    last_lost_us: int | None = Field(description="commit time of the last one known lost, µs")
    span_s: float = Field(description="source time from consistency_ts to the last lost commit")
    text: str


class OrderedFailoverReport(BaseModel):
    """An ordered feed's failover: what the target holds, what was lost."""

    kind: Literal["ordered"] = "ordered"
    feed: str
    source: str
    target: str = Field(description="the sink URI (secrets masked): the primary now")
    stopped_by: Literal["coordinator", "operator"]
    source_reachable: bool
    consistency_ts_us: int = Field(
        description="the target holds the source's state exactly as of this commit time"
    )
    last_txn: str = Field(
        description="the last source transaction applied (Debezium: <xid>.<commit lsn>)"
    )
    last_commit_ts_us: int
    rpo: RpoReport
    epoch: int = Field(description="the target's fencing epoch after the failover")
    failed_over_at_ms: int
    sinks_ended: int = Field(description="sink sessions ended on the target")
    fenced_tasks: int
    notes: list[str]


def run_ordered_failover(
    hooks: FailoverHooks, feed: FeedSpec, managed: bool
) -> OrderedFailoverReport:
    sink = feed.sink
    if sink.scheme != "postgresql" or sink.dsn is None:
        raise HTTPException(
            400, f"feed {feed.name!r}: failover of an ordered feed into {sink.scheme} is not built"
        )
    fencing = _fencing()
    settings = hooks.settings
    notes: list[str] = []
    stopped_by: Literal["coordinator", "operator"] = "operator"
    if managed and hooks.mark_failed_over is not None:
        hooks.mark_failed_over(feed.name)
        stopped_by = "coordinator"
    else:
        notes.append(
            f"feed {feed.name} is not run by the coordinator: stop its puller, sorter and "
            "sink processes yourself (the sinks are fenced: they apply nothing more)"
        )
    staging = settings.staging_alias(None)
    staging_conf = settings.cluster(staging).client_config()
    fenced_tasks = fence_pullers(staging_conf, feed)
    if fenced_tasks.failed:
        notes.append(
            f"puller task(s) {sorted(fenced_tasks.failed)} could not be fenced on {staging}: "
            "copies they left open are not counted until the broker aborts them"
        )
    schema = sink.schema_name or "public"
    dsn = resolve_references(sink.dsn, "the sink URI")
    try:
        position = fencing.fence(dsn, schema, feed.name)
    except LookupError as err:
        raise HTTPException(
            409, f"feed {feed.name!r}: nothing was applied to the target ({err})"
        ) from None
    except TimeoutError as err:
        raise HTTPException(503, f"feed {feed.name!r}: {err}") from None
    consistency = takeover.consistency_of(position.commit_ts, position.checkpoint_ts)
    applied_order = (
        takeover.debezium_order(position.txn) if feed.input == "debezium" else consistency
    )
    since_ms = max(0, position.commit_ts // 1000 - known.LOOKBACK_MS)
    source_conf = settings.cluster(feed.source).client_config()
    try:
        found = known.from_source(source_conf, feed, since_ms)
        reachable, exact = True, True
        where = (
            f"{feed.source}'s Debezium transaction topic"
            if feed.input == "debezium"
            else f"{feed.source}'s source topics"
        )
    except known.Unanswered as err:
        found = known.from_staging(staging_conf, feed, since_ms)
        reachable, exact = False, False
        where = f"the feed's copies on {staging} ({topics.changes(feed.name)})"
        notes.append(f"{err}: the RPO counts only what crossed before it was lost")
    rpo = takeover.rpo(applied_order, consistency, found, exact=exact, known_from=where)
    report = OrderedFailoverReport(
        feed=feed.name,
        source=feed.source,
        target=mask_text(feed.sink_uri),
        stopped_by=stopped_by,
        source_reachable=reachable,
        consistency_ts_us=consistency,
        last_txn=position.txn,
        last_commit_ts_us=position.commit_ts,
        rpo=RpoReport(
            transactions=rpo.transactions,
            exact=rpo.exact,
            known_from=rpo.known_from,
            first_lost_us=rpo.first_lost_us,
            last_lost_us=rpo.last_lost_us,
            span_s=rpo.span_s,
            text=rpo.text(),
        ),
        epoch=position.epoch,
        failed_over_at_ms=position.failed_over_at_ms,
        sinks_ended=position.terminated,
        fenced_tasks=len(fenced_tasks.tasks),
        notes=notes,
    )
    fencing.record(dsn, schema, feed.name, position.epoch, report.model_dump())
    log.info(
        "feed %s failed over: target %s holds the source as of %d (txn %s); RPO %s",
        feed.name,
        report.target,
        consistency,
        position.txn,
        rpo.text(),
    )
    return report


def _fencing() -> Any:
    """crossfeed.fencing, which needs the postgres extra (imported when used)."""
    try:
        require("postgres", "failover of a feed into PostgreSQL")
    except MissingExtra as err:
        raise HTTPException(400, str(err)) from None
    from crossfeed import fencing

    return fencing


def failover_record(feed: FeedSpec) -> dict[str, Any] | None:
    """The newest failover report kept on an ordered feed's PostgreSQL target."""
    sink = feed.sink
    if feed.mode != "ordered" or sink.scheme != "postgresql" or sink.dsn is None:
        return None
    fencing = _fencing()
    import psycopg

    dsn = resolve_references(sink.dsn, "the sink URI")
    try:
        kept: dict[str, Any] | None = fencing.latest(dsn, sink.schema_name or "public", feed.name)
    except psycopg.Error as err:
        raise HTTPException(503, f"cannot read the target of feed {feed.name}: {err}") from None
    return kept
