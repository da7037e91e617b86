"""``crossfeed failover --feed F`` for an ordered feed (docs/disaster-recovery.md): its
target — a PostgreSQL database or a Kafka topic — becomes the primary, at a transaction
boundary, knowing what it holds and what was lost.

1. Stop F: a feed the coordinator runs is set to ``failed_over`` (its puller tasks stop);
   every puller task is fenced on the staging cluster (``fence.py``): what a dead puller
   left open there is aborted, so the feed's copies can be read to their end.
2. PostgreSQL: fence the target (``crossfeed/fencing.py``): the sessions of the feed's
   sinks end, the position row's epoch is bumped and it is marked failed over; no sink of
   F writes to the target again. The row says what the target holds: the last source
   transaction applied and consistency_ts — the source's state exactly as of that commit.
   Kafka: the last whole source transaction in the target topic (read_committed, its
   ``crossfeed-commit-ts`` and ``crossfeed-txn``); the sinks are not fenced (the report
   says to stop them).
3. The RPO (``crossfeed/core/takeover.py``): the source transactions known to have
   committed after it. Read from the source cluster when it answers (a Debezium feed's
   transaction topic, a change producer's topics): exact. Else from the feed's copies on
   the staging cluster: at least that many.
4. The report; for a PostgreSQL target also a row of ``S.crossfeed_failover`` there.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Literal

from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as KafkaTP
from fastapi import HTTPException
from pydantic import BaseModel, Field

from crossfeed.config.settings import resolve_references
from crossfeed.core import takeover
from crossfeed.core.secrets import mask_text
from crossfeed.extras import MissingExtra, require
from crossfeed.feeds import FeedSpec
from crossfeed.kafka.tails import TailReader
from crossfeed.services.coordinator.failover import known
from crossfeed.services.coordinator.failover.fence import fence_pullers
from crossfeed.services.coordinator.failover.hooks import FailoverHooks
from crossfeed.wire import headers, topics
from crossfeed.wire.changes import parse_txn

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


@dataclass(frozen=True, slots=True)
class Held:
    """What the target holds after the failover, and how it was fenced."""

    commit_ts: int
    txn: str
    checkpoint_ts: int
    epoch: int
    failed_over_at_ms: int
    sinks_ended: int
    sequences: tuple[str, ...] = ()
    """Sequences moved past their columns' values on a PostgreSQL target."""


def run_ordered_failover(
    hooks: FailoverHooks, feed: FeedSpec, managed: bool
) -> OrderedFailoverReport:
    sink = feed.sink
    postgres = sink.scheme == "postgresql" and sink.dsn is not None
    if not postgres and (sink.scheme != "kafka" or not sink.topic):
        raise HTTPException(400, f"feed {feed.name!r}: its sink URI names no target to fail over")
    settings = hooks.settings
    notes: list[str] = []
    stopped_by: Literal["coordinator", "operator"] = "operator"
    if managed and hooks.mark_failed_over is not None:
        hooks.mark_failed_over(feed.name)
        stopped_by = "coordinator"
    else:
        notes.append(
            f"feed {feed.name} is not run by the coordinator: stop its puller, sorter and "
            "sink processes yourself"
        )
    staging = settings.staging_alias(None if postgres else sink.cluster)
    staging_conf = settings.cluster(staging).client_config()
    fenced_tasks = fence_pullers(staging_conf, feed)
    if fenced_tasks.failed:
        notes.append(
            f"puller task(s) {sorted(fenced_tasks.failed)} could not be fenced on {staging}: "
            "copies they left open are not counted until the broker aborts them"
        )
    if postgres:
        held = _fence_database(feed)
        if held.sequences:
            notes.append(
                "sequences moved past the values their columns hold (logical decoding does "
                "not carry them): " + ", ".join(held.sequences)
            )
    else:
        held = _topic_end(settings.cluster(str(sink.cluster)).client_config(), feed)
        notes.append(
            f"the feed's sinks are not fenced on {sink.cluster}: stop them; until then they "
            f"may add whole source transactions that had already crossed to {sink.topic} "
            "after the last one reported"
        )
    consistency = takeover.consistency_of(held.commit_ts, held.checkpoint_ts)
    applied_order = takeover.debezium_order(held.txn) if feed.input == "debezium" else consistency
    since_ms = max(0, held.commit_ts // 1000 - known.LOOKBACK_MS)
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
        last_txn=held.txn,
        last_commit_ts_us=held.commit_ts,
        rpo=RpoReport(
            transactions=rpo.transactions,
            exact=rpo.exact,
            known_from=rpo.known_from,
            first_lost_us=rpo.first_lost_us,
            last_lost_us=rpo.last_lost_us,
            span_s=rpo.span_s,
            text=rpo.text(),
        ),
        epoch=held.epoch,
        failed_over_at_ms=held.failed_over_at_ms,
        sinks_ended=held.sinks_ended,
        fenced_tasks=len(fenced_tasks.tasks),
        notes=notes,
    )
    if postgres:
        _record(feed, report)
    log.info(
        "feed %s failed over: target %s holds the source as of %d (txn %s); RPO %s",
        feed.name,
        report.target,
        consistency,
        held.txn,
        rpo.text(),
    )
    return report


def _fence_database(feed: FeedSpec) -> Held:
    """Fence a PostgreSQL target (crossfeed/fencing.py); what its position row says."""
    fencing = _fencing()
    sink = feed.sink
    assert sink.dsn is not None
    dsn = resolve_references(sink.dsn, "the sink URI")
    try:
        p = fencing.fence(dsn, sink.schema_name or "public", feed.name)
    except LookupError as err:
        raise HTTPException(
            409, f"feed {feed.name!r}: nothing was applied to the target ({err})"
        ) from None
    except TimeoutError as err:
        raise HTTPException(503, f"feed {feed.name!r}: {err}") from None
    moved = tuple(fencing.advance_sequences(dsn, sink.schema_name or "public"))
    return Held(
        p.commit_ts, p.txn, p.checkpoint_ts, p.epoch, p.failed_over_at_ms, p.terminated, moved
    )


def _record(feed: FeedSpec, report: OrderedFailoverReport) -> None:
    sink = feed.sink
    assert sink.dsn is not None
    dsn = resolve_references(sink.dsn, "the sink URI")
    _fencing().record(
        dsn, sink.schema_name or "public", feed.name, report.epoch, report.model_dump()
    )


def _written(record_headers: list[tuple[str, bytes | None]] | None) -> tuple[int, str] | None:
    """(commit_ts, txn id) of a source transaction's record in the target topic."""
    commit_ts, txn = None, ""
    for name, value in record_headers or ():
        if name == headers.TYPE:
            return None
        if name == headers.COMMIT_TS and value is not None and value.isdigit():
            commit_ts = int(value)
        elif name == headers.TXN:
            try:
                txn = parse_txn(value).txn
            except ValueError:
                return None
    return None if commit_ts is None else (commit_ts, txn)


def _topic_end(conf: dict[str, Any], feed: FeedSpec) -> Held:
    """The last whole source transaction a Kafka target topic holds (read_committed)."""
    assert feed.sink.topic is not None
    reader = TailReader(conf)
    try:
        tail = reader.read(KafkaTP(feed.sink.topic, 0), _written)
    except KafkaException as err:
        raise HTTPException(503, f"cannot read the end of {feed.sink.topic}: {err}") from None
    finally:
        reader.close()
    commit_ts, txn = tail.committed or (0, "")
    return Held(commit_ts, txn, 0, 0, int(time.time() * 1000), 0)


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
