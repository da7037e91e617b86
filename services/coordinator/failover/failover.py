"""``crossfeed failover --feed F``: Replicator's failover procedure, automated.

1. Stop F: a feed the coordinator runs is set to ``failed_over`` (its puller tasks stop);
   a feed-file feed's processes are the operator's to stop (the report says so). Nothing
   waits in between: a mirror feed's pullers write the target topics directly, and what
   they committed is all the target will ever have from them. Every puller task is
   fenced on the target (``fence.py``, while step 2 runs): what a dead puller left open
   is aborted at once, not after its timeout, so read_committed consumers of the target
   are not held back, and a puller still running commits nothing more.
2. Translate every group one last time from what is known — the translator's memory
   (last listed offsets, consumer timestamps already read), else the checkpoints written
   before — and move each group that has no members on the target forward to its
   translation (never backwards: running failover twice cannot rewind a group that has
   started consuming on the target).
3. Report per partition what the source held that never reached the target (the RPO,
   records and seconds), from the source's end offsets as last seen; and per group
   partition whether it resumes at its last commit, or how old its last known commit is
   and how many records it may read again (``rpo.position_rpo``).
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

from fastapi import HTTPException

from crossfeed.services.coordinator.failover.common import grouped, resolve_feed
from crossfeed.services.coordinator.failover.fence import fence_pullers
from crossfeed.services.coordinator.failover.hooks import FailoverHooks
from crossfeed.services.coordinator.failover.models import FailoverReport, FailoverRequest, RpoOut
from crossfeed.services.coordinator.failover.ordered import (
    OrderedFailoverReport,
    run_ordered_failover,
)
from crossfeed.translation.translator import Translator

log = logging.getLogger(__name__)


def run_failover(
    hooks: FailoverHooks, request: FailoverRequest
) -> FailoverReport | OrderedFailoverReport:
    feed, managed = resolve_feed(hooks, request.feed, request.feed_spec, ordered=True)
    if feed.mode == "ordered":
        return run_ordered_failover(hooks, feed, managed)
    target = str(feed.sink.cluster)
    notes: list[str] = []
    stopped_by: Literal["coordinator", "operator"] = "operator"
    # Take the running translator before stopping the feed: stopping it ends its ticks.
    # One made here reads the source once: no commit stream to wait for (see translator.py).
    translator = hooks.take_translator(feed.name) or Translator(
        hooks.settings, feed, stream_commits=False
    )
    background = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fence")
    try:
        if managed and hooks.mark_failed_over is not None:
            hooks.mark_failed_over(feed.name)
            stopped_by = "coordinator"
        else:
            notes.append(
                f"feed {feed.name} is not run by the coordinator: stop its puller "
                "processes yourself if they still run"
            )
        log.info("failover of feed %s (%s -> %s) started", feed.name, feed.source, target)
        fencing = background.submit(
            fence_pullers, hooks.settings.cluster(target).client_config(), feed
        )
        if not translator.wait_ready(30):
            raise HTTPException(503, f"cannot read the offset syncs on {target} (waited 30s)")
        results, tick = translator.final()
        rows = [RpoOut.of(r) for r in translator.rpo()]
        fenced = fencing.result()
    finally:
        translator.close()
        background.shutdown(wait=True)
    if fenced.failed:
        notes.append(
            f"puller task(s) {sorted(fenced.failed)} could not be fenced on {target} "
            f"({next(iter(fenced.failed.values()))}): a transaction one of them left open "
            "holds read_committed consumers back until the broker times it out (15-25 s)"
        )
    if tick.source_reachable:
        notes.append(
            f"{feed.source} still answers: consumers still running there keep committing on "
            "it; stop them before starting them on the target"
        )
    else:
        notes.append(
            f"{feed.source} does not answer: group offsets as last seen (listed, or in "
            "__consumer_timestamps), source ends as last seen"
        )
    if tick.note:
        notes.append(tick.note)
    known = [r.unreplicated for r in rows if r.unreplicated >= 0]
    positions = [r.position for r in results if r.position is not None]
    seconds = [r.rpo_seconds for r in rows if r.rpo_seconds is not None]
    report = FailoverReport(
        feed=feed.name,
        source=feed.source,
        target=target,
        stopped_by=stopped_by,
        source_reachable=tick.source_reachable,
        groups=grouped(feed.name, results, tick.source_reachable),
        moved=tick.committed,
        active=tick.active,
        partitions=rows,
        unreplicated_records=sum(known),
        rpo_seconds=max(seconds) if seconds else None,
        positions_at_last_commit=sum(1 for p in positions if p.last_commit),
        positions_stale=sum(1 for p in positions if not p.last_commit),
        reread_max_records=sum(p.reread_max for p in positions if p.reread_max > 0),
        fenced_tasks=len(fenced.tasks),
        notes=notes,
    )
    log.info(
        "feed %s failed over to %s: %d group(s) moved, %d left alone (active), %d record(s) "
        "known on %s never replicated",
        feed.name,
        target,
        len(report.moved),
        len(report.active),
        report.unreplicated_records,
        feed.source,
    )
    return report
