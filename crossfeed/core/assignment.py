"""Balanced, sticky assignment of source partitions to live instances (puller tasks).

``assign(partitions, instances, previous)`` guarantees:

A. Every partition is assigned to exactly one live instance; nothing else is assigned.
B. Balanced: with P partitions and N instances every instance gets ``P // N`` or
   ``P // N + 1`` partitions.
C. Sticky with minimum movement: among all balanced assignments it keeps the largest
   possible number of partitions with their previous owner, when that owner is alive.
   The ``P % N`` larger quotas go to the instances that can keep the most; an instance
   over its quota keeps its lowest partitions and releases the rest.
D. Deterministic: the result depends only on the sets given, never on iteration order.
   Released and new partitions are dealt round-robin in sorted order to the instances
   that are short, so the partitions of one topic spread over the instances.
E. No instances → an empty assignment.

A partition listed for several previous owners (an inconsistent input) stays with the
smallest live instance id among them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from crossfeed.core.partitions import TopicPartition

Assignment = dict[str, frozenset[TopicPartition]]


def assign(
    partitions: Iterable[TopicPartition],
    instances: Iterable[str],
    previous: Mapping[str, Iterable[TopicPartition]],
) -> Assignment:
    """Assign ``partitions`` to ``instances`` (see the module invariants)."""
    live = sorted(set(instances))
    if not live:
        return {}
    wanted = set(partitions)
    base, extra = divmod(len(wanted), len(live))

    claimed: set[TopicPartition] = set()
    candidates: dict[str, list[TopicPartition]] = {}
    for instance in live:
        mine = sorted((set(previous.get(instance, ())) & wanted) - claimed)
        candidates[instance] = mine
        claimed.update(mine)

    by_claim = sorted(live, key=lambda i: (-len(candidates[i]), i))
    quota = {instance: base + (1 if rank < extra else 0) for rank, instance in enumerate(by_claim)}

    result: dict[str, list[TopicPartition]] = {}
    for instance in live:
        result[instance] = candidates[instance][: quota[instance]]
    kept = {tp for tps in result.values() for tp in tps}
    # The pool holds exactly the missing quota; deal it one per short instance per round.
    pool = iter(sorted(wanted - kept))
    short = [i for i in live if len(result[i]) < quota[i]]
    while short:
        for instance in short:
            result[instance].append(next(pool))
        short = [i for i in short if len(result[i]) < quota[i]]
    return {instance: frozenset(tps) for instance, tps in result.items()}


@dataclass(frozen=True, slots=True)
class InstanceChange:
    """What one instance loses and gains between two assignments."""

    revoked: frozenset[TopicPartition]
    added: frozenset[TopicPartition]


def diff(
    old: Mapping[str, Iterable[TopicPartition]], new: Mapping[str, Iterable[TopicPartition]]
) -> dict[str, InstanceChange]:
    """Per instance, the partitions revoked and added; instances without change omitted."""
    changes: dict[str, InstanceChange] = {}
    for instance in sorted(set(old) | set(new)):
        before = frozenset(old.get(instance, ()))
        after = frozenset(new.get(instance, ()))
        if before != after:
            changes[instance] = InstanceChange(revoked=before - after, added=after - before)
    return changes


@dataclass(frozen=True, slots=True, order=True)
class Move:
    """One partition changing hands; ``None`` means no owner on that side."""

    partition: TopicPartition
    from_instance: str | None
    to_instance: str | None

    def describe(self, cluster_alias: str | None = None) -> str:
        """One line for the log, e.g. ``assigned dc-a/orders/3 to puller-2``."""
        name = f"{cluster_alias}/{self.partition}" if cluster_alias else str(self.partition)
        if self.from_instance is None:
            return f"assigned {name} to {self.to_instance}"
        if self.to_instance is None:
            return f"revoked {name} from {self.from_instance}"
        return f"moved {name} from {self.from_instance} to {self.to_instance}"


def moves(
    old: Mapping[str, Iterable[TopicPartition]], new: Mapping[str, Iterable[TopicPartition]]
) -> list[Move]:
    """Every partition whose owner differs between ``old`` and ``new``, sorted."""
    before = _owners(old)
    after = _owners(new)
    return sorted(
        Move(tp, before.get(tp), after.get(tp))
        for tp in set(before) | set(after)
        if before.get(tp) != after.get(tp)
    )


def describe(
    old: Mapping[str, Iterable[TopicPartition]],
    new: Mapping[str, Iterable[TopicPartition]],
    cluster_alias: str | None = None,
) -> str:
    """One line summarising a reassignment, e.g. for ``logger.info``.

    ``"12 partitions on 3 instances: assigned dc-a/orders/3 to puller-2; ..."`` or
    ``"... : no change"``.
    """
    owned = _owners(new)
    head = f"{len(owned)} partitions on {len(new)} instances"
    changed = moves(old, new)
    if not changed:
        return f"{head}: no change"
    return f"{head}: " + "; ".join(m.describe(cluster_alias) for m in changed)


def _owners(assignment: Mapping[str, Iterable[TopicPartition]]) -> dict[TopicPartition, str]:
    """Partition → owner; a partition listed twice goes to the smallest instance id."""
    owners: dict[TopicPartition, str] = {}
    for instance in sorted(assignment, reverse=True):
        for tp in assignment[instance]:
            owners[tp] = instance
    return owners
