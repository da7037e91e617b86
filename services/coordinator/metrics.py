"""The coordinator's metrics (names: ``crossfeed_coordinator_<what>_<unit>``, docs/design.md).

The HA set follows seed 004 (worker_role, worker_heartbeat_age_seconds,
worker_failovers_total, job_lease_renewals_total, job_lease_expired_total); the rest
describes the feeds the leader runs.
"""

import contextlib
from collections.abc import Mapping

from prometheus_client import Counter, Gauge, Histogram

from crossfeed.services.coordinator import views
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.members import MembersView

ROLE = Gauge("crossfeed_coordinator_role", "HA role of this coordinator: 1 leader, 0 standby")
LEASE_EPOCH = Gauge(
    "crossfeed_coordinator_lease_epoch", "Epoch of the coordinator lease as this instance read it"
)
HEARTBEAT_AGE = Gauge(
    "crossfeed_coordinator_heartbeat_age_seconds",
    "Time since the last heartbeat of each known instance (peers and workers)",
    ("instance", "role"),
)
FAILOVERS = Counter(
    "crossfeed_coordinator_failovers_total",
    "Times this instance became leader in place of another coordinator",
)
LEASE_RENEWALS = Counter(
    "crossfeed_coordinator_lease_renewals_total", "Lease renewal attempts by this instance"
)
LEASE_EXPIRED = Counter(
    "crossfeed_coordinator_lease_expired_total",
    "Expired leases this instance took over (the previous holder stopped renewing)",
)
LEADER_FAILOVER_SECONDS = Histogram(
    "crossfeed_coordinator_leader_failover_seconds",
    "On taking over another coordinator's lease: time since it last renewed it, i.e. at "
    "most how long no coordinator led (observed by the new leader)",
    buckets=(0.5, 1.0, 2.5, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0),
)
FAILOVER_SECONDS = Histogram(
    "crossfeed_coordinator_failover_duration_seconds",
    "Duration of consumer failover and failback runs (POST /v1/failover, /v1/failback), "
    "by operation and outcome (ok, refused, failed)",
    ("operation", "outcome"),
    buckets=(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0),
)
FEEDS = Gauge("crossfeed_coordinator_feeds", "Feeds per lifecycle state (leader only)", ("state",))
TASKS = Gauge(
    "crossfeed_coordinator_tasks",
    "Puller tasks assigned per feed and instance (leader only)",
    ("feed", "instance"),
)
GENERATION = Gauge(
    "crossfeed_coordinator_assignment_generation",
    "Latest puller assignment generation per feed",
    ("feed",),
)
RESOLVED_TS = Gauge(
    "crossfeed_coordinator_resolved_timestamp_seconds",
    "Global resolved_ts per feed (min over its source partitions), epoch seconds",
    ("feed",),
)
CHECKPOINT_TS = Gauge(
    "crossfeed_coordinator_checkpoint_timestamp_seconds",
    "checkpoint_ts per feed (min over its source partitions), epoch seconds",
    ("feed",),
)
CONSISTENCY_TS = Gauge(
    "crossfeed_coordinator_consistency_timestamp_seconds",
    "consistency_ts (safe point) per feed, epoch seconds; never goes backwards",
    ("feed",),
)
CONSISTENCY_LAG = Gauge(
    "crossfeed_coordinator_consistency_lag_seconds",
    "Now minus consistency_ts per feed",
    ("feed",),
)


def _clear_stale(gauge: Gauge, keep: set[tuple[str, ...]], seen: set[tuple[str, ...]]) -> None:
    for labels in seen - keep:
        with contextlib.suppress(KeyError):
            gauge.remove(*labels)
    seen.clear()
    seen.update(keep)


_seen_ages: set[tuple[str, ...]] = set()
_seen_tasks: set[tuple[str, ...]] = set()
_seen_feeds: set[tuple[str, ...]] = set()


def publish(
    view: StateView,
    ages_ms: Mapping[str, tuple[str, int]],
    now_ms: int,
    members: MembersView | None = None,
) -> None:
    """Set every gauge from one snapshot; series of vanished instances and feeds go away.
    The consistency lag of an ordered feed whose source is idle (views.idle_since) is 0:
    lag means changes waiting."""
    keep: set[tuple[str, ...]] = set()
    for instance, (role, age) in ages_ms.items():
        HEARTBEAT_AGE.labels(instance, role).set(age / 1000)
        keep.add((instance, role))
    _clear_stale(HEARTBEAT_AGE, keep, _seen_ages)

    counts = dict.fromkeys(("normal", "paused", "error", "failed", "removed", "failed_over"), 0)
    for name in view.feeds:
        counts[view.state(name) or "normal"] += 1
    for state, count in counts.items():
        FEEDS.labels(state).set(count)

    keep = set()
    feeds: set[tuple[str, ...]] = set()
    for name, assignments in view.assignments.items():
        for instance, assignment in assignments.items():
            if assignment.tasks:
                TASKS.labels(name, instance).set(len(assignment.tasks))
                keep.add((name, instance))
        latest = max((a.generation for a in assignments.values()), default=0)
        GENERATION.labels(name).set(latest)
        feeds.add((name,))
    _clear_stale(TASKS, keep, _seen_tasks)

    for name, status in view.statuses.items():
        RESOLVED_TS.labels(name).set(status.resolved_ts_us / 1e6)
        CHECKPOINT_TS.labels(name).set(status.checkpoint_ts_us / 1e6)
        CONSISTENCY_TS.labels(name).set(status.consistency_ts_us / 1e6)
        if status.consistency_ts_us:
            sorters = members.of_role("sorter", name).values() if members else ()
            idle = views.idle_since(sorters, status.checkpoint_ts_us)
            lag = 0.0 if idle else now_ms / 1000 - status.consistency_ts_us / 1e6
            CONSISTENCY_LAG.labels(name).set(max(lag, 0))
        feeds.add((name,))
    for gauge in (GENERATION, RESOLVED_TS, CHECKPOINT_TS, CONSISTENCY_TS, CONSISTENCY_LAG):
        _clear_stale(gauge, feeds, set(_seen_feeds))
    _seen_feeds.clear()
    _seen_feeds.update(feeds)
