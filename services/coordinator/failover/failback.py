"""``crossfeed failback --feed F``: return to the old primary once it is back.

1. The old primary must answer.
2. Extra data: per partition, the records on the old primary past the forward feed's
   replicated frontier — written there but never copied before the failover.
3. ``replay_extra``: copy them to the standby, exactly once (``replay.py``). Where the
   standby took new writes since the failover, they land after those (their order
   relative to the new writes is the operator's call, as in Replicator's procedure).
4. The reverse feed (standby → old primary): created through the coordinator for a feed
   it runs, else described for the operator to start; its first positions are the
   forward frontier on the standby (``reverse.py``), so it copies only what the standby
   got since — and provenance keeps anything from the old primary from going back.
5. Waits up to ``wait_s`` for the reverse feed to catch up, then translates the groups
   back (and, within the same ``wait_s``, for groups with members on the old primary to
   have none — clients that died with it are members again when it returns, until their
   sessions time out): standby offsets → old-primary offsets through the reverse feed's syncs, or —
   for a group still inside the copies of the old primary's records — through the
   copies' provenance (``crossfeed-prov``), which names the original. Only exact translations move a
   group (with no members on the old primary); the others are listed as waiting: run
   failback again once the reverse feed has caught up (it is idempotent).
6. Complete — the reverse feed caught up and every group back on the old primary: the
   forward feed replicates again (``failed_over`` → ``normal``: its pullers take their
   tasks back), and the reverse feed failback created is removed, its work done (kept
   with ``keep_reverse``, or when the request named its own). Not complete: the forward
   feed stays ``failed_over``, and the report says what to start (the reverse feed's
   pullers when it has tasks no puller runs) before running failback again.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import HTTPException

from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka.topics import partitions_of
from crossfeed.services.coordinator.failover.common import grouped, resolve_feed
from crossfeed.services.coordinator.failover.hooks import FailoverHooks
from crossfeed.services.coordinator.failover.models import (
    ExtraOut,
    FailbackReport,
    FailbackRequest,
    ReverseOut,
    RpoOut,
)
from crossfeed.services.coordinator.failover.replay import Copied, ExtraRange, replay
from crossfeed.services.coordinator.failover.reverse import (
    reverse_name,
    reverse_spec,
    seed_positions,
)
from crossfeed.translation import kafka_io
from crossfeed.translation.kafka_io import TP, Unreachable, shared_admin
from crossfeed.translation.rpo import PartitionRpo
from crossfeed.translation.translator import Translator

log = logging.getLogger(__name__)


def run_failback(hooks: FailoverHooks, request: FailbackRequest) -> FailbackReport:
    feed, managed = resolve_feed(hooks, request.feed, request.feed_spec)
    settings = hooks.settings
    primary, standby = feed.source, str(feed.sink.cluster)
    primary_conf = settings.cluster(primary).client_config()
    standby_conf = settings.cluster(standby).client_config()
    primary_id = clients.cluster_id(primary_conf, 5.0)
    if primary_id is None:
        raise HTTPException(
            409,
            f"{primary} does not answer: failback needs the old primary back (on the local "
            f"stack: 'crossfeed local start {primary}')",
        )
    standby_id = clients.cluster_id(standby_conf, 5.0)
    if standby_id is None:
        raise HTTPException(503, f"{standby} does not answer")
    name = request.reverse_feed or reverse_name(feed.name)
    existing = hooks.find_feed(name)
    reverse = existing or reverse_spec(feed, name)
    notes: list[str] = []

    primary_tps = _selected(primary_conf, feed)
    _wait_for_partitions(primary, primary_conf, primary_tps)
    forward = Translator(settings, feed, stream_commits=False)
    try:
        if not forward.wait_ready(30):
            raise HTTPException(503, f"cannot read the offset syncs on {standby} (waited 30s)")
        rows = forward.rpo(primary_tps, read_target=False)
        if any(r.source_end is None for r in rows):
            raise HTTPException(503, f"{primary} does not give the end of every partition yet")
        # Taken before any replay: the standby's own writes since the failover sit right
        # after the forward copies, before the replayed ones (which provenance drops).
        starts = _forward_frontier(forward, feed, primary_id)
        copied: dict[TP, Copied] = {}
        if request.replay_extra and any(r.unreplicated != 0 for r in rows):
            copied = _replay(hooks, feed, rows, primary_id, standby_id)
    finally:
        forward.close()
    extra = [_extra(r, copied.get((r.topic, r.partition))) for r in rows]

    seeded = False
    action: Any = "existing"
    if existing is None:
        if request.reverse_start == "frontier":
            seeded = seed_positions(settings, reverse, starts, standby_id)
        if managed and hooks.create_feed is not None:
            hooks.create_feed(reverse)
            action = "created"
        else:
            action = "start-it"
            notes.append(
                f"start the reverse feed {name} ({standby} -> {primary}): its puller and sink "
                "processes, with the feed file of this spec; then run failback again to move "
                "the groups still waiting"
            )

    back = Translator(settings, reverse, stream_commits=False)
    try:
        if not back.wait_ready(30):
            raise HTTPException(503, f"cannot read the offset syncs on {primary} (waited 30s)")
        floors = starts if request.reverse_start == "frontier" else {}
        reverse_tps = _selected(standby_conf, reverse)
        lag = back.rpo(reverse_tps, read_target=False, floors=floors)
        deadline = time.monotonic() + request.wait_s
        while not _caught_up(lag) and time.monotonic() < deadline:
            time.sleep(1.0)
            lag = back.rpo(reverse_tps, read_target=False, floors=floors)
        results, tick = back.final(exact_only=True)
        # Consumers that died with the old primary are members of their groups there
        # again when it comes back, until their sessions time out: a group with members
        # is never moved, so wait (within wait_s) for them to leave.
        while tick.active and time.monotonic() < deadline:
            time.sleep(2.0)
            results, tick = back.final(exact_only=True)
    finally:
        back.close()
    waiting = sorted({r.group for r in results if not r.exact})
    if waiting:
        notes.append(
            f"{len(waiting)} group(s) wait for the reverse feed to copy what they read on "
            f"{standby}: run failback again once it has caught up"
        )
    if tick.active:
        notes.append(
            f"{len(tick.active)} group(s) have members on {primary}, so they were not moved: "
            f"stop their consumers there; consumers that died with {primary} stay members "
            "until their session times out (session.timeout.ms, 45 s by default in Kafka's "
            "Java client, 60 s in faust): run failback again then, or give --wait"
        )
    complete = _caught_up(lag) and not waiting and not tick.active
    forward_state, removed = "failed_over", False
    if complete and managed and hooks.mark_failed_back is not None:
        hooks.mark_failed_back(feed.name)
        forward_state = "normal"
        ours = request.reverse_feed is None and action != "start-it"
        if ours and not request.keep_reverse and hooks.remove_feed is not None:
            hooks.remove_feed(name)
            removed = True
    unassigned = 0 if removed or action == "start-it" else hooks.unassigned_tasks(name)
    if unassigned:
        notes.append(
            f"{unassigned} task(s) of the reverse feed {name} have no puller: start them with "
            f"'crossfeed puller run --feed {name}'"
            + ("" if complete else ", then run failback again")
        )
    report = FailbackReport(
        feed=feed.name,
        old_primary=primary,
        standby=standby,
        extra=extra,
        extra_records=sum(max(e.extra, 0) for e in extra),
        replayed_records=sum(c.records for c in copied.values()),
        reverse=ReverseOut(
            name=name,
            action=action,
            spec=_spec_dict(reverse),
            positions_seeded=seeded,
            lag=[RpoOut.of(r) for r in lag],
            caught_up=_caught_up(lag),
            removed=removed,
            unassigned_tasks=unassigned,
        ),
        groups=grouped(reverse.name, results, tick.source_reachable),
        moved=tick.committed,
        active=tick.active,
        waiting=waiting,
        complete=complete,
        forward_state=forward_state,
        notes=notes,
    )
    log.info(
        "failback of feed %s: %d extra record(s) on %s (%d replayed), reverse feed %s %s, "
        "%d group(s) moved back, %d waiting",
        feed.name,
        report.extra_records,
        primary,
        report.replayed_records,
        name,
        action,
        len(report.moved),
        len(waiting),
    )
    return report


def _selected(conf: dict[str, Any], feed: FeedSpec) -> list[TP]:
    """Every partition of the topics the feed selects, as the cluster has them now."""
    return partitions_of(shared_admin(conf).client(), feed.selector.selects)


def _wait_for_partitions(alias: str, conf: dict[str, Any], tps: list[TP]) -> None:
    """A cluster that just came back answers metadata requests before every partition has
    its leader again: wait (30 s at most) until all of them answer."""
    admin = shared_admin(conf)
    deadline = time.monotonic() + 30
    while True:
        try:
            kafka_io.end_offsets(admin, tps)
            return
        except Unreachable as err:
            if time.monotonic() > deadline:
                raise HTTPException(
                    503, f"{alias} answers, but not for all its partitions yet ({err}); retry"
                ) from None
            time.sleep(1.0)


def _replay(
    hooks: FailoverHooks, feed: FeedSpec, rows: list[PartitionRpo], primary_id: str, standby_id: str
) -> dict[TP, Copied]:
    ranges = [
        ExtraRange(r.topic, r.partition, r.replicated_to or 0, r.source_end)
        for r in rows
        if r.source_end is not None and r.unreplicated != 0
    ]
    return replay(hooks.settings, feed, ranges, primary_id, standby_id)


def _forward_frontier(forward: Translator, feed: FeedSpec, primary_id: str) -> dict[TP, int]:
    """Per standby partition, where the forward feed's copies end."""
    starts: dict[TP, int] = {}
    with forward.syncs.locked() as book:
        for entry in book.of_feed(feed.name):
            frontier = entry.frontier()
            if entry.source_cluster == primary_id and frontier is not None:
                starts[(entry.target_topic, entry.target_partition)] = frontier.target_next
    return starts


def _extra(row: PartitionRpo, copied: Copied | None) -> ExtraOut:
    return ExtraOut(
        topic=row.topic,
        partition=row.partition,
        replicated_to=row.replicated_to or 0,
        end=row.source_end if row.source_end is not None else -1,
        extra=row.unreplicated,
        counted=row.counted,
        replayed=copied.records if copied is not None else 0,
    )


def _caught_up(lag: list[PartitionRpo]) -> bool:
    return all(r.unreplicated == 0 for r in lag)


def _spec_dict(feed: FeedSpec) -> dict[str, Any]:
    data = feed.model_dump(by_alias=True)
    data["config"] = feed.config.model_dump(by_alias=True, exclude_unset=True)
    return data
