"""Failover step: fence the feed's puller tasks on the target.

A puller killed with its data center (or cut off from it) can leave a Kafka transaction
open on the target. Until the broker times it out (the puller's ``transaction.timeout.ms``,
15 s, plus the broker's abort sweep, up to 10 s more) every read_committed consumer of the
partitions it wrote stops at its first record — the copies before it are readable, but
nothing written on the target after it is, not even the target's own new writes. So
failover takes over each task's fixed transactional.id (``init_transactions``): the broker
aborts what the old owner left open and writes its markers at once, and a puller that
still runs can commit nothing more.

Done per task in parallel (a task is one partition of the feed's staging topic, so its
count is ``staging.partitions``); a task that cannot be fenced in time is reported, not
fatal: its transaction still ends when the broker times it out.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.wire import ids

log = logging.getLogger(__name__)

FENCE_TIMEOUT_S = 10.0
PARALLEL = 8


@dataclass
class FenceResult:
    """What fencing the feed's tasks did: the tasks taken over, and errors by task."""

    tasks: list[int] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)


def fence_pullers(target_conf: dict[str, Any], feed: FeedSpec) -> FenceResult:
    """Take over every puller task's transactional.id of ``feed`` on the target."""
    tasks = list(range(feed.config.staging_partitions))
    out = FenceResult()

    def fence(task: int) -> str | None:
        try:
            clients.transactional_producer(
                target_conf,
                ids.puller_transactional_id(feed.name, task),
                init_timeout_s=FENCE_TIMEOUT_S,
            )
        except Exception as err:  # KafkaException; reported, the failover goes on
            return f"{type(err).__name__}: {err}"
        return None

    with ThreadPoolExecutor(max_workers=min(PARALLEL, len(tasks)) or 1) as pool:
        for task, error in zip(tasks, pool.map(fence, tasks), strict=True):
            if error is None:
                out.tasks.append(task)
            else:
                out.failed[task] = error
    if out.failed:
        log.warning("feed %s: puller tasks not fenced on the target: %s", feed.name, out.failed)
    return out
