"""A feed's next FeedStatus from its instances' heartbeats: state and timestamps, no I/O.

State (docs/design.md, Vocabulary; the lifecycle of ``lifecycle.py``): a running feed is ``error``
while any live instance of the feed reports a ``last_error`` (the first one, by instance
id, becomes the feed's ``last_error``) and ``normal`` again when none does; the instances
keep retrying meanwhile. A feed stuck in ``error`` for ``stuck_after_ms`` becomes
``failed``: its tasks stop until an operator resumes it. Other states change only by
operator command.

Timestamps, all "≤ ts is complete", microseconds:

* the feed's source partitions are the keys of its pullers' ``resolved`` (each
  puller reports resolved_ts per source partition it reads; sinks report their
  checkpoint_ts per source partition in ``checkpoints``);
* ``resolved_ts_us`` = min over those partitions of their resolved_ts (the global
  resolved_ts);
* ``checkpoint_ts_us`` = min over those partitions of the sinks' checkpoint_ts, 0
  (unknown) while a partition has none yet;
* ``consistency_ts_us`` = the same min, published only when every partition has a
  checkpoint, and never below its previous value
  (:func:`crossfeed.core.timestamps.consistency_ts`).

With no live puller (a paused feed, say) nothing is known and the timestamps stay.

Ordered feeds (docs/ordered-feeds.md §4) are applied from one globally sorted stream,
whose resolved marks carry only the global resolved_ts R: a sink's ``checkpoint_ts_us``
heartbeat field is the feed's checkpoint_ts (R of the newest mark it committed with
everything before it), not a per-partition map. ``checkpoint_ts_us`` = the highest any
live sink reports (several sink instances share the one sorted partition; the one that
owns it reports the newest value, a previous owner an older one), and
``consistency_ts_us`` = it, never below its previous value. ``resolved_ts_us`` still
comes from the pullers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from crossfeed.core.timestamps import consistency_ts
from crossfeed.services.coordinator.members import Member
from crossfeed.services.coordinator.records import RUNNING_STATES, FeedStatus


def merged(maps: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Per source partition, the highest timestamp any of ``maps`` holds."""
    out: dict[str, int] = {}
    for timestamps in maps:
        for partition, ts in timestamps.items():
            out[partition] = max(ts, out.get(partition, ts))
    return out


def next_status(
    previous: FeedStatus,
    instances: Sequence[Member],
    *,
    now_ms: int,
    epoch: int,
    error_age_ms: int,
    stuck_after_ms: int,
    ordered: bool = False,
) -> FeedStatus:
    """``previous`` updated from the live ``instances`` of the feed (any role).

    ``error_age_ms`` is how long the feed has been in ``error`` (0 if it is not).
    """
    state, last_error = previous.state, previous.last_error
    if state in RUNNING_STATES:
        errors = sorted((m.instance_id, m.last_error) for m in instances if m.last_error)
        if not errors:
            state, last_error = "normal", None
        elif state == "error" and error_age_ms >= stuck_after_ms:
            state = "failed"
        else:
            state, last_error = "error", f"{errors[0][0]}: {errors[0][1]}"

    resolved = merged(m.resolved for m in instances if m.role == "puller")
    checkpoints = merged(m.checkpoints for m in instances if m.role in ("sink", "puller"))
    status = replace(
        previous, state=state, last_error=last_error, updated_at_ms=now_ms, leader_epoch=epoch
    )
    if ordered:
        return _ordered(status, resolved, instances)
    if not resolved:
        return status
    status = replace(status, resolved_ts_us=min(resolved.values()))
    if any(p not in checkpoints for p in resolved):
        return replace(status, checkpoint_ts_us=0)
    known = {p: checkpoints[p] for p in resolved}
    return replace(
        status,
        checkpoint_ts_us=min(known.values()),
        consistency_ts_us=consistency_ts(known, previous.consistency_ts_us),
    )


def control_lost(statuses: Mapping[str, FeedStatus], reason: str) -> dict[str, FeedStatus]:
    """The statuses to show while the control cluster does not answer: every running
    feed ``error`` with ``reason``. Nothing can be written meanwhile (no heartbeat is
    read, no status published), and the last published ``normal`` would hide that no
    instance can coordinate, or even report, any progress."""
    return {
        name: replace(status, state="error", last_error=reason)
        if status.state in RUNNING_STATES
        else status
        for name, status in statuses.items()
    }


def _ordered(
    status: FeedStatus, resolved: dict[str, int], instances: Sequence[Member]
) -> FeedStatus:
    """An ordered feed's timestamps: the sinks' feed-wide checkpoint_ts (module doc)."""
    if resolved:
        status = replace(status, resolved_ts_us=min(resolved.values()))
    checkpoint = max(
        (m.checkpoint_ts_us for m in instances if m.role == "sink" and m.checkpoint_ts_us > 0),
        default=0,
    )
    if not checkpoint:
        return status
    return replace(
        status,
        checkpoint_ts_us=checkpoint,
        consistency_ts_us=consistency_ts({"feed": checkpoint}, status.consistency_ts_us),
    )
