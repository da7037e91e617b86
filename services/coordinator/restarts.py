"""Restarting a feed's puller tasks: when a revoked task may be handed out again (no I/O).

``crossfeed changefeed restart`` revokes tasks (all of a feed's, or one) and holds them
out of the assignment until their owner has let go, then assigns them again like any
unowned task. The new run starts like any task start: a new transactional producer
(which fences anything the old run left open) from the task's committed marks on the
target, so nothing is lost or copied twice.

A held task is released once its owner's heartbeat, sent after the revocation, no
longer lists it; or once the owner is no longer alive; or after ``max_hold_ms`` (an
owner that never says it let go: the producer fencing still protects the data).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Held:
    """A revoked task waiting for its owner (None: it had none) to let go."""

    owner: str | None
    since_ms: int


@dataclass(frozen=True, slots=True)
class OwnerBeat:
    """An owner's newest heartbeat: when it was sent and the task numbers it lists."""

    sent_at_ms: int
    tasks: frozenset[int]


def still_held(
    held: Mapping[int, Held],
    beats: Mapping[str, OwnerBeat],
    now_ms: int,
    max_hold_ms: int,
) -> dict[int, Held]:
    """The tasks that stay held; the others may be assigned again."""
    out = {}
    for task, h in held.items():
        if h.owner is None or now_ms - h.since_ms >= max_hold_ms:
            continue
        beat = beats.get(h.owner)
        if beat is None:  # the owner is gone: its tasks are free anyway
            continue
        if beat.sent_at_ms > h.since_ms and task not in beat.tasks:
            continue
        out[task] = h
    return out


def puller_task_numbers(feed: str, tasks: tuple[str, ...] | list[str]) -> frozenset[int]:
    """Task numbers of ``feed`` in a puller heartbeat's ``tasks`` (``<feed>/puller/<n>``)."""
    prefix = f"{feed}/puller/"
    return frozenset(int(t[len(prefix) :]) for t in tasks if t.startswith(prefix))
