"""Restarting tasks: when a revoked task may be given out again, and what a feed update
may change (pure logic)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.lifecycle import LifecycleError, restartable
from crossfeed.services.coordinator.restarts import Held, OwnerBeat, puller_task_numbers, still_held
from crossfeed.services.coordinator.updates import check_update

pytestmark = pytest.mark.unit

FEED = {"name": "orders", "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["o.*"]}


def spec(**overrides: object) -> FeedSpec:
    return FeedSpec.model_validate({**FEED, **overrides})


def test_a_task_is_held_until_a_newer_heartbeat_of_its_owner_no_longer_lists_it() -> None:
    held = {3: Held("p1", since_ms=1000)}
    before = {"p1": OwnerBeat(sent_at_ms=999, tasks=frozenset())}  # sent before the revoke
    assert still_held(held, before, now_ms=1500, max_hold_ms=10_000) == held
    running = {"p1": OwnerBeat(sent_at_ms=1200, tasks=frozenset({3}))}
    assert still_held(held, running, now_ms=1500, max_hold_ms=10_000) == held
    let_go = {"p1": OwnerBeat(sent_at_ms=1200, tasks=frozenset({2}))}
    assert still_held(held, let_go, now_ms=1500, max_hold_ms=10_000) == {}


def test_a_task_whose_owner_is_gone_or_silent_too_long_or_absent_is_released() -> None:
    running = {"p1": OwnerBeat(sent_at_ms=1200, tasks=frozenset({3}))}
    assert still_held({3: Held("p2", 1000)}, running, 1500, 10_000) == {}  # p2 not alive
    assert still_held({3: Held("p1", 1000)}, running, 11_000, 10_000) == {}  # held too long
    assert still_held({3: Held(None, 1000)}, running, 1001, 10_000) == {}  # it had no owner


@given(
    st.dictionaries(st.integers(0, 7), st.sampled_from(["p1", "p2", None]), max_size=8),
    st.integers(0, 20_000),
)
def test_held_tasks_never_grow_and_all_go_within_the_limit(
    owners: dict[int, str | None], now: int
) -> None:
    held = {s: Held(o, 0) for s, o in owners.items()}
    beats = {"p1": OwnerBeat(0, frozenset(owners)), "p2": OwnerBeat(0, frozenset(owners))}
    left = still_held(held, beats, now, 10_000)
    assert set(left) <= set(held)
    if now >= 10_000:
        assert left == {}


def test_task_numbers_are_read_from_a_puller_heartbeat() -> None:
    beat = ("orders/puller/3", "orders/puller/10", "other/puller/1")
    assert puller_task_numbers("orders", beat) == {3, 10}


def test_restartable_tasks() -> None:
    feed = spec(config={"staging.partitions": 4})
    assert restartable("orders", "normal", feed, None) == [0, 1, 2, 3]
    assert restartable("orders", "error", feed, 2) == [2]
    cases = [
        ("paused", 0, 409, "invalid_state"),
        (None, 0, 404, "feed_not_found"),
        ("removed", None, 404, "feed_not_found"),
        ("normal", 4, 404, "task_not_found"),
    ]
    for state, task, status, code in cases:
        with pytest.raises(LifecycleError) as err:
            restartable("orders", state, feed if state else None, task)
        assert (err.value.status_code, err.value.code) == (status, code)


def test_an_update_may_change_the_selection_and_options_only() -> None:
    base = spec()
    assert check_update(base, spec()) is False
    assert check_update(base, spec(topics=["o.*", "p"])) is True
    assert check_update(base, spec(exclude=["o.tmp"])) is True
    assert check_update(base, spec(config={"errors.tolerance": "none"})) is True
    for changed, field in [
        ({"source": "dc-c"}, "source"),
        ({"sink-uri": "kafka://dc-c"}, "sink-uri"),
        ({"start": "latest"}, "start"),
        ({"config": {"staging.partitions": 4}}, "staging.partitions"),
    ]:
        with pytest.raises(LifecycleError) as err:
            check_update(base, spec(**changed))
        assert (err.value.status_code, err.value.code) == (409, "immutable_field")
        assert f"{field} cannot change once the feed exists" in err.value.message
