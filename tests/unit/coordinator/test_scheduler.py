"""The coordinator's scheduler: snapshot in, assignment rounds out (no Kafka)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.records import Assignment, FeedStatus, StoredFeed
from crossfeed.services.coordinator.scheduler import Round, plan, plan_feed

pytestmark = pytest.mark.unit


def stored(
    current: Mapping[str, set[int]], epoch: int = 1, generation: int = 1
) -> dict[str, Assignment]:
    return {
        i: Assignment("orders", "puller", i, epoch, generation, frozenset(tasks))
        for i, tasks in current.items()
    }


def tasks_of(round_: Round | None) -> dict[str, set[int]]:
    assert round_ is not None
    return {a.instance_id: set(a.tasks) for a in round_.assignments}


def test_first_round_is_balanced_and_says_what_it_did() -> None:
    round_ = plan_feed("orders", "normal", 8, {}, ["p1", "p2", "p3"], epoch=7)
    assert round_ is not None
    sizes = sorted(len(t) for t in tasks_of(round_).values())
    assert sizes == [2, 3, 3]
    assert set().union(*tasks_of(round_).values()) == set(range(8))
    assert round_.generation == 1
    assert all(a.epoch == 7 and a.generation == 1 for a in round_.assignments)
    assert "assigned task orders/0 to p1 (epoch 7, generation 1)" in round_.lines


def test_nothing_to_write_when_the_stored_assignment_stands() -> None:
    current = stored({"p1": {0, 1, 2, 3}, "p2": {4, 5, 6, 7}}, epoch=3)
    assert plan_feed("orders", "normal", 8, current, ["p1", "p2"], epoch=3) is None


def test_a_silent_puller_loses_its_tasks_and_gets_an_empty_assignment() -> None:
    current = stored({"p1": {0, 1, 2}, "p2": {3, 4, 5}, "p3": {6, 7}}, generation=4)
    round_ = plan_feed("orders", "normal", 8, current, ["p1", "p2"], epoch=1)
    assert round_ is not None
    after = tasks_of(round_)
    assert after["p3"] == set()
    assert {0, 1, 2} <= after["p1"] and {3, 4, 5} <= after["p2"]  # sticky
    assert after["p1"] | after["p2"] == set(range(8))
    assert round_.generation == 5
    assert any(line.startswith("moved task orders/6 from p3 to") for line in round_.lines)


def test_a_fourth_puller_takes_a_share_moving_only_what_it_must() -> None:
    current = stored({"p1": {0, 1, 2}, "p2": {3, 4, 5}, "p3": {6, 7}})
    round_ = plan_feed("orders", "normal", 8, current, ["p1", "p2", "p3", "p4"], epoch=1)
    assert round_ is not None
    after = tasks_of(round_)
    assert sorted(len(t) for t in after.values()) == [2, 2, 2, 2]
    moved = sum(len(current[i].tasks - after[i]) for i in current)
    assert moved == 2  # p4 needs 2; nobody else changes hands
    assert after["p3"] == {6, 7}


def test_paused_feed_revokes_everything_and_then_rests() -> None:
    current = stored({"p1": {0, 1, 2, 3}, "p2": {4, 5, 6, 7}})
    round_ = plan_feed("orders", "paused", 8, current, ["p1", "p2"], epoch=1)
    assert round_ is not None
    assert tasks_of(round_) == {"p1": set(), "p2": set()}
    assert "revoked task orders/0 from p1 (feed is paused) (epoch 1, generation 2)" in round_.lines
    emptied = {a.instance_id: a for a in round_.assignments}
    assert plan_feed("orders", "paused", 8, emptied, ["p1", "p2"], epoch=1) is None


def test_a_new_leader_reissues_tasks_under_its_epoch() -> None:
    current = stored({"p1": {0, 1}, "p2": {2, 3}}, epoch=3, generation=9)
    round_ = plan_feed("orders", "normal", 4, current, ["p1", "p2"], epoch=4)
    assert round_ is not None
    assert tasks_of(round_) == {"p1": {0, 1}, "p2": {2, 3}}
    assert all(a.epoch == 4 and a.generation == 10 for a in round_.assignments)
    assert round_.lines == (
        "re-issued 4 task(s) of orders under the new leader (epoch 4, generation 10)",
    )


def test_long_silent_pullers_with_empty_assignments_are_left_alone() -> None:
    current = {**stored({"p1": {0, 1}}), **stored({"gone": set()})}
    assert plan_feed("orders", "normal", 2, current, ["p1"], epoch=1) is None


def test_no_live_puller_revokes_and_says_why() -> None:
    round_ = plan_feed("orders", "normal", 2, stored({"p1": {0, 1}}), [], epoch=1)
    assert round_ is not None
    assert "revoked task orders/0 from p1 (no live puller) (epoch 1, generation 2)" in round_.lines


def test_plan_covers_every_feed_with_its_own_options() -> None:
    spec = FeedSpec.model_validate(
        {
            "name": "orders",
            "source": "dc-a",
            "sink-uri": "kafka://dc-b",
            "topics": ["o.*"],
            "config": {"staging.partitions": "3"},
        }
    )
    other = spec.model_copy(update={"name": "users"})
    view = StateView(
        feeds={"orders": StoredFeed(spec, 0), "users": StoredFeed(other, 0)},
        statuses={"users": FeedStatus("users", "paused")},
    )
    rounds = plan(view, {"orders": ["p1"], "users": ["p1"]}, epoch=2)
    assert [r.feed for r in rounds] == ["orders"]
    assert tasks_of(rounds[0]) == {"p1": {0, 1, 2}}


def test_restarted_tasks_are_revoked_then_assigned_again_once_released() -> None:
    current = stored({"p1": {0, 1}, "p2": {2, 3}}, generation=2)
    revoked = plan_feed("orders", "normal", 4, current, ["p1", "p2"], epoch=1, held=frozenset({1}))
    assert tasks_of(revoked) == {"p1": {0}, "p2": {2, 3}}
    assert revoked is not None and revoked.generation == 3
    assert "revoked task orders/1 from p1 (restart) (epoch 1, generation 3)" in revoked.lines
    after_revoke = stored(tasks_of(revoked), generation=3)
    # still held: nothing to write; released: it is assigned again (to the short puller)
    assert plan_feed("orders", "normal", 4, after_revoke, ["p1", "p2"], 1, frozenset({1})) is None
    again = plan_feed("orders", "normal", 4, after_revoke, ["p1", "p2"], epoch=1)
    assert tasks_of(again) == {"p1": {0, 1}, "p2": {2, 3}}
