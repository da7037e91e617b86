"""Which puller runs which task: one decision per feed, on a snapshot, no I/O.

A puller task is a staging partition ``s`` of ``_crossfeed.<feed>.changes``
(``0 <= s < staging.partitions``). For a feed in a running state (normal, error) the
tasks go to the feed's live pullers, balanced and sticky (:func:`crossfeed.core.assignment.assign`,
previous = the assignments in ``_crossfeed.state``); for any other state (paused, failed,
removed, failed_over) every puller of the feed gets nothing, so its tasks stop. Tasks
being restarted (``restarts.py``) are held out: revoked, and assigned again once released.

A round is written when the result differs from what is stored, or when stored tasks
were given under an older leader epoch (a new leader re-issues them under its own). It
holds one Assignment per puller of the feed — every live one and every one that held
tasks, so a silent or leaving puller gets an empty assignment — all with the leader's
epoch and the feed's next generation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from crossfeed.core.assignment import assign
from crossfeed.core.partitions import TopicPartition
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.records import RUNNING_STATES, Assignment, task_name
from crossfeed.wire import topics


@dataclass(frozen=True, slots=True)
class Round:
    """One feed's new assignments and the story of what changed, a line per decision."""

    feed: str
    generation: int
    assignments: tuple[Assignment, ...]
    lines: tuple[str, ...]


def plan(
    view: StateView,
    live_pullers: Mapping[str, Iterable[str]],
    epoch: int,
    held: Mapping[str, Iterable[int]] | None = None,
) -> list[Round]:
    """The rounds to write, for every feed whose assignment must change; ``held``: per
    feed, the tasks being restarted (given to nobody)."""
    rounds = []
    for name in sorted(view.feeds):
        status = view.statuses.get(name)
        state = status.state if status else "normal"
        round_ = plan_feed(
            name,
            state,
            view.feeds[name].spec.config.staging_partitions,
            view.assignments.get(name, {}),
            live_pullers.get(name, ()),
            epoch,
            frozenset((held or {}).get(name, ())),
        )
        if round_ is not None:
            rounds.append(round_)
    return rounds


def plan_feed(
    feed: str,
    state: str,
    staging_partitions: int,
    current: Mapping[str, Assignment],
    live: Iterable[str],
    epoch: int,
    held: frozenset[int] = frozenset(),
) -> Round | None:
    """The next round for one feed, or None when the stored assignment stands."""
    live_set = set(live) if state in RUNNING_STATES else set()
    changes = topics.changes(feed)
    before = {
        i: frozenset(TopicPartition(changes, s) for s in a.tasks)
        for i, a in current.items()
        if a.tasks
    }
    if state in RUNNING_STATES:
        tasks = [TopicPartition(changes, s) for s in range(staging_partitions) if s not in held]
        after = assign(tasks, live_set, before)
    else:
        after = {}
    targets = set(before) | live_set
    changed = any(before.get(i, frozenset()) != after.get(i, frozenset()) for i in targets)
    stale = any(a.epoch < epoch for a in current.values() if a.tasks)
    if not changed and not stale:
        return None
    generation = max((a.generation for a in current.values()), default=0) + 1
    assignments = tuple(
        Assignment(
            feed=feed,
            role="puller",
            instance_id=i,
            epoch=epoch,
            generation=generation,
            tasks=frozenset(tp.partition for tp in after.get(i, frozenset())),
        )
        for i in sorted(targets)
    )
    story = _story(feed, state, before, after, epoch, generation, held)
    return Round(feed, generation, assignments, story)


def _story(
    feed: str,
    state: str,
    before: Mapping[str, frozenset[TopicPartition]],
    after: Mapping[str, frozenset[TopicPartition]],
    epoch: int,
    generation: int,
    held: frozenset[int],
) -> tuple[str, ...]:
    owner_before = {tp.partition: i for i, tps in before.items() for tp in tps}
    owner_after = {tp.partition: i for i, tps in after.items() for tp in tps}
    suffix = f"(epoch {epoch}, generation {generation})"
    lines = []
    for s in sorted(set(owner_before) | set(owner_after)):
        old, new = owner_before.get(s), owner_after.get(s)
        task = task_name(feed, s)
        if old == new:
            continue
        if old is None:
            lines.append(f"assigned task {task} to {new} {suffix}")
        elif new is None:
            if state not in RUNNING_STATES:
                why = f"feed is {state}"
            else:
                why = "restart" if s in held else "no live puller"
            lines.append(f"revoked task {task} from {old} ({why}) {suffix}")
        else:
            lines.append(f"moved task {task} from {old} to {new} {suffix}")
    if not lines:
        count = sum(len(tps) for tps in after.values())
        lines.append(f"re-issued {count} task(s) of {feed} under the new leader {suffix}")
    return tuple(lines)
