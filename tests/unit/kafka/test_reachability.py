"""When an instance says a cluster is lost: only after steady polling without a broker up."""

from __future__ import annotations

import json

import pytest

from crossfeed.kafka import reachability
from crossfeed.kafka.reachability import DOWN_AFTER_S, Reachability

pytestmark = pytest.mark.unit

UP = json.dumps({"brokers": {"b1": {"state": "UP"}}})
DOWN = json.dumps({"brokers": {"b1": {"state": "CONNECT"}}})


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(reachability.time, "monotonic", fake)
    return fake


def poll_for(tracker: Reachability, clock: Clock, seconds: float, stats: str) -> None:
    """Poll every 0.1 s; statistics arrive each second."""
    for tick in range(int(seconds * 10)):
        clock.now += 0.1
        tracker.polled()
        if tick % 10 == 9:
            tracker.on_stats(stats)


def test_a_cluster_without_a_broker_up_is_lost_after_steady_polling(clock: Clock) -> None:
    tracker = Reachability("target", "dc-b", {"bootstrap.servers": "127.0.0.1:29092"})
    poll_for(tracker, clock, 3, UP)
    assert tracker.problem() is None
    poll_for(tracker, clock, DOWN_AFTER_S - 1.5, DOWN)
    assert tracker.problem() is None  # not yet
    poll_for(tracker, clock, 2, DOWN)
    problem = tracker.problem()
    assert problem is not None and "target cluster dc-b (127.0.0.1:29092) unreachable" in problem
    poll_for(tracker, clock, 1, UP)
    assert tracker.problem() is None


def test_a_client_not_polled_for_a_while_says_nothing_about_its_cluster(clock: Clock) -> None:
    tracker = Reachability("source", "dc-a", {"bootstrap.servers": "127.0.0.1:19092"})
    poll_for(tracker, clock, 2, UP)
    clock.now += 30  # its thread was busy elsewhere: no statistics were served
    tracker.polled()
    assert not tracker.up()  # not known to be up (the puller's caught-up check)
    assert tracker.problem() is None  # but not known to be down either
    poll_for(tracker, clock, 1.5, UP)
    assert tracker.problem() is None
