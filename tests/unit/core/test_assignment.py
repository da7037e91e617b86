"""Unit and property tests for crossfeed.core.assignment."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping
from typing import ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.assignment import (
    InstanceChange,
    Move,
    assign,
    describe,
    diff,
    moves,
)
from crossfeed.core.partitions import TopicPartition as TP

pytestmark = pytest.mark.unit


def tps(topic: str, n: int) -> set[TP]:
    return {TP(topic, p) for p in range(n)}


partitions_st = st.sets(
    st.builds(TP, st.sampled_from(["a", "b", "c"]), st.integers(0, 7)), max_size=20
)
instances_st = st.sets(st.sampled_from([f"p{i}" for i in range(6)]), max_size=5)


@st.composite
def previous_st(draw: st.DrawFn) -> dict[str, set[TP]]:
    owners = [f"p{i}" for i in range(6)]
    pool = sorted(draw(partitions_st))
    previous: dict[str, set[TP]] = {}
    for tp in pool:
        if draw(st.booleans()):
            previous.setdefault(draw(st.sampled_from(owners)), set()).add(tp)
    return previous


def kept(previous: Mapping[str, set[TP]], result: Mapping[str, frozenset[TP]]) -> int:
    return sum(len(previous.get(i, set()) & result[i]) for i in result)


class TestAssign:
    def test_no_instances(self) -> None:
        assert assign(tps("a", 3), [], {"x": tps("a", 3)}) == {}

    def test_no_partitions(self) -> None:
        assert assign([], ["p1", "p2"], {}) == {"p1": frozenset(), "p2": frozenset()}

    def test_fresh_assignment_is_round_robin(self) -> None:
        result = assign(tps("orders", 6), ["p2", "p1", "p3"], {})
        assert result == {
            "p1": frozenset({TP("orders", 0), TP("orders", 3)}),
            "p2": frozenset({TP("orders", 1), TP("orders", 4)}),
            "p3": frozenset({TP("orders", 2), TP("orders", 5)}),
        }

    def test_dead_instance_partitions_move_others_stay(self) -> None:
        previous = {
            "p1": {TP("t", 0), TP("t", 1)},
            "p2": {TP("t", 2), TP("t", 3)},
            "p3": {TP("t", 4), TP("t", 5)},
        }
        result = assign(tps("t", 6), ["p1", "p2"], previous)
        assert previous["p1"] <= result["p1"]
        assert previous["p2"] <= result["p2"]
        assert len(result["p1"]) == len(result["p2"]) == 3

    def test_new_instance_takes_from_the_largest(self) -> None:
        previous = {"p1": tps("t", 4)}
        result = assign(tps("t", 4), ["p1", "p2"], previous)
        assert result == {
            "p1": frozenset({TP("t", 0), TP("t", 1)}),
            "p2": frozenset({TP("t", 2), TP("t", 3)}),
        }

    def test_extra_quota_goes_to_the_instance_that_keeps_most(self) -> None:
        previous = {"p1": {TP("t", 0)}, "p2": {TP("t", 1), TP("t", 2)}}
        result = assign(tps("t", 3), ["p1", "p2"], previous)
        assert result == {"p1": frozenset({TP("t", 0)}), "p2": frozenset({TP("t", 1), TP("t", 2)})}

    def test_partition_claimed_twice_stays_with_smallest_id(self) -> None:
        previous = {"p2": {TP("t", 0)}, "p1": {TP("t", 0)}}
        result = assign({TP("t", 0), TP("t", 1)}, ["p1", "p2"], previous)
        assert result == {"p1": frozenset({TP("t", 0)}), "p2": frozenset({TP("t", 1)})}

    def test_removed_partitions_are_dropped(self) -> None:
        result = assign({TP("t", 0)}, ["p1"], {"p1": {TP("t", 0), TP("gone", 0)}})
        assert result == {"p1": frozenset({TP("t", 0)})}


@given(partitions_st, instances_st, previous_st())
def test_complete_exclusive_and_balanced(
    partitions: set[TP], instances: set[str], previous: dict[str, set[TP]]
) -> None:
    result = assign(partitions, instances, previous)
    if not instances:
        assert result == {}
        return
    assert set(result) == instances
    assigned = [tp for owned in result.values() for tp in owned]
    assert sorted(assigned) == sorted(partitions)  # every partition exactly once
    sizes = [len(owned) for owned in result.values()]
    assert max(sizes) - min(sizes) <= 1


@given(partitions_st, instances_st, previous_st(), st.randoms(use_true_random=False))
def test_deterministic_regardless_of_iteration_order(
    partitions: set[TP], instances: set[str], previous: dict[str, set[TP]], rnd: random.Random
) -> None:
    expected = assign(partitions, instances, previous)
    shuffled_parts = list(partitions)
    shuffled_insts = list(instances)
    rnd.shuffle(shuffled_parts)
    rnd.shuffle(shuffled_insts)
    items = list(previous.items())
    rnd.shuffle(items)
    shuffled_prev = {k: list(v) for k, v in items}
    assert assign(shuffled_parts, shuffled_insts, shuffled_prev) == expected


@given(partitions_st, instances_st, previous_st())
def test_owner_within_quota_keeps_everything(
    partitions: set[TP], instances: set[str], previous: dict[str, set[TP]]
) -> None:
    result = assign(partitions, instances, previous)
    if not instances:
        return
    base = len(partitions) // len(instances)
    for instance in instances:
        mine = previous.get(instance, set()) & partitions
        if len(mine) <= base:
            assert mine <= result[instance]


@given(partitions_st, instances_st, previous_st())
def test_stable_when_nothing_changes(
    partitions: set[TP], instances: set[str], previous: dict[str, set[TP]]
) -> None:
    first = assign(partitions, instances, previous)
    assert assign(partitions, instances, first) == first


def _best_kept(partitions: set[TP], instances: list[str], previous: Mapping[str, set[TP]]) -> int:
    """Brute force: the most partitions any balanced assignment keeps in place."""
    ordered = sorted(partitions)
    base, extra = divmod(len(ordered), len(instances))
    best = 0
    for owners in itertools.product(instances, repeat=len(ordered)):
        counts = [owners.count(i) for i in instances]
        if sorted(counts) != sorted([base + 1] * extra + [base] * (len(instances) - extra)):
            continue
        best = max(
            best, sum(tp in previous.get(o, set()) for tp, o in zip(ordered, owners, strict=True))
        )
    return best


@given(
    st.sets(st.builds(TP, st.just("t"), st.integers(0, 5)), max_size=6),
    st.sets(st.sampled_from(["p0", "p1", "p2"]), min_size=1),
    st.dictionaries(
        st.sampled_from(["p0", "p1", "p2", "dead"]),
        st.sets(st.builds(TP, st.just("t"), st.integers(0, 5)), max_size=4),
    ),
)
def test_minimum_movement_matches_brute_force(
    partitions: set[TP], instances: set[str], previous: dict[str, set[TP]]
) -> None:
    # make previous consistent: each partition has at most one previous owner
    seen: set[TP] = set()
    clean: dict[str, set[TP]] = {}
    for owner in sorted(previous):
        clean[owner] = previous[owner] - seen
        seen |= previous[owner]
    result = assign(partitions, instances, clean)
    assert kept(clean, result) == _best_kept(partitions, sorted(instances), clean)


class TestDiffAndDescribe:
    old: ClassVar[dict[str, set[TP]]] = {
        "p1": {TP("orders", 0), TP("orders", 1)},
        "p2": {TP("orders", 2)},
    }
    new: ClassVar[dict[str, set[TP]]] = {
        "p1": {TP("orders", 0)},
        "p2": {TP("orders", 2), TP("orders", 3)},
        "p3": {TP("orders", 1)},
    }

    def test_diff(self) -> None:
        assert diff(self.old, self.new) == {
            "p1": InstanceChange(revoked=frozenset({TP("orders", 1)}), added=frozenset()),
            "p2": InstanceChange(revoked=frozenset(), added=frozenset({TP("orders", 3)})),
            "p3": InstanceChange(revoked=frozenset(), added=frozenset({TP("orders", 1)})),
        }

    def test_diff_omits_unchanged(self) -> None:
        assert diff(self.old, self.old) == {}

    def test_moves(self) -> None:
        assert moves(self.old, self.new) == [
            Move(TP("orders", 1), "p1", "p3"),
            Move(TP("orders", 3), None, "p2"),
        ]

    def test_move_descriptions(self) -> None:
        assert Move(TP("orders", 3), None, "puller-2").describe("dc-a") == (
            "assigned dc-a/orders/3 to puller-2"
        )
        assert (
            Move(TP("orders", 3), "puller-1", None).describe() == "revoked orders/3 from puller-1"
        )
        assert Move(TP("orders", 3), "a", "b").describe("dc-a") == "moved dc-a/orders/3 from a to b"

    def test_describe_one_line(self) -> None:
        line = describe(self.old, self.new, "dc-a")
        assert line == (
            "4 partitions on 3 instances: moved dc-a/orders/1 from p1 to p3; "
            "assigned dc-a/orders/3 to p2"
        )
        assert "\n" not in line
        assert describe(self.old, self.old) == "3 partitions on 2 instances: no change"


@given(partitions_st, instances_st, previous_st())
def test_diff_applied_to_old_gives_new(
    partitions: set[TP], instances: set[str], previous: dict[str, set[TP]]
) -> None:
    new = assign(partitions, instances, previous)
    changes = diff(previous, new)
    for instance in set(previous) | set(new):
        before = set(previous.get(instance, set()))
        change = changes.get(instance, InstanceChange(frozenset(), frozenset()))
        assert (before - change.revoked) | change.added == set(new.get(instance, set()))
        assert not change.revoked & change.added
