"""Task assignment and feed status under real coordinators, with simulated pullers and
sinks (real heartbeats on ``_crossfeed.heartbeats``) and a reader of the assignments that
applies them as a puller must."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from crossfeed.client.rest import CoordinatorClient
from crossfeed.kafka import clients
from crossfeed.services.coordinator.records import Assignment
from crossfeed.wire import topics
from tests.integration.test_coordinator_process import (
    FAILOVER_S,
    TOKEN,
    AssignmentReader,
    Coordinators,
    SimulatedPuller,
    balanced,
    coordinator_group,
    create_feed,
    owners,
    remove_feed_quietly,
    wait_for,
)
from tests.support.clusters import Clusters

pytestmark = pytest.mark.integration

TICK_SLACK_S = 1.5  # a tick, a heartbeat interval and a read of the state topic


@pytest.fixture(scope="module")
def group(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinators]:
    yield from coordinator_group(clusters, tmp_path_factory.mktemp("scheduler"), 2)


@pytest.fixture
def name(group: Coordinators) -> Iterator[str]:
    feed = f"sched-{uuid.uuid4().hex[:8]}"
    yield feed
    remove_feed_quietly(group, feed)


@pytest.fixture
def pullers(clusters: Clusters) -> Iterator[list[SimulatedPuller]]:
    started: list[SimulatedPuller] = []
    yield started
    for puller in started:
        puller.leave()


def test_tasks_are_balanced_sticky_and_move_on_silence_leave_and_join(
    clusters: Clusters, group: Coordinators, name: str, pullers: list[SimulatedPuller]
) -> None:
    leader = group.leader()
    create_feed(leader.url, name, 8)

    def puller(n: int) -> SimulatedPuller:
        p = SimulatedPuller(clusters, f"{name}-p{n}", name).start()
        pullers.append(p)
        return p

    with AssignmentReader(clusters, name) as reader:
        p0, p1, p2 = puller(0), puller(1), puller(2)
        ids = {p.instance_id for p in (p0, p1, p2)}
        first = reader.wait_tasks(balanced(3, 8, ids), 15, "8 tasks on 3 pullers")

        # silence: p2's tasks move within failover.timeout; the others keep theirs
        p2.go_silent()
        silenced = time.monotonic()
        two = {p0.instance_id, p1.instance_id}
        after = reader.wait_tasks(balanced(2, 8, two), FAILOVER_S + 5, "p2's tasks moved")
        took = time.monotonic() - silenced
        assert took <= FAILOVER_S + TICK_SLACK_S, f"reassigned after {took:.1f}s"
        for p in (p0, p1):
            assert first[p.instance_id] <= after[p.instance_id]

        # graceful leave: p1's tasks move at once, not after the timeout
        p1.leave()
        left = time.monotonic()
        reader.wait_tasks(balanced(1, 8, {p0.instance_id}), FAILOVER_S, "p1's tasks moved")
        assert time.monotonic() - left < FAILOVER_S / 2

        # joiners take shares; a fourth moves only what it must (8 on 4: 2 tasks)
        p3, p4 = puller(3), puller(4)
        three = {p0.instance_id, p3.instance_id, p4.instance_id}
        before = reader.wait_tasks(balanced(3, 8, three), 15, "8 tasks on p0, p3, p4")
        p5 = puller(5)
        four = three | {p5.instance_id}
        now = reader.wait_tasks(balanced(4, 8, four), 15, "8 tasks on 4 pullers")
        moved = [s for s, owner in owners(before).items() if owners(now)[s] != owner]
        assert len(moved) == 2, (before, now)
        assert all(owners(now)[s] == p5.instance_id for s in moved)

        epochs = {r["epoch"] for r in reader.applied}
        assert len(epochs) == 1 and not reader.ignored
        generations = [r["generation"] for r in reader.applied]
        assert generations == sorted(generations)

        # pause revokes every task; resume gives them back
        with CoordinatorClient(leader.url, TOKEN) as api:
            api.pause_feed(name)
            reader.wait_tasks(lambda t: not t, 5, "every task revoked")
            api.resume_feed(name)
            reader.wait_tasks(balanced(4, 8, four), 5, "tasks back after resume")
            status = api.get_feed(name)["status"]
        assert {t["owner"] for t in status["tasks"]} == four
        wait_for(
            lambda: leader.metric("crossfeed_coordinator_tasks", {"feed": name}) == 8,
            5,
            "the task metric counting 8 tasks",
        )


def test_feed_status_follows_errors_and_consistency_ts(
    clusters: Clusters, group: Coordinators, name: str, pullers: list[SimulatedPuller]
) -> None:
    leader = group.leader()
    create_feed(leader.url, name, 2)
    # A mirror feed's puller: resolved_ts read, checkpoint_ts committed in the target.
    puller = SimulatedPuller(clusters, f"{name}-p", name)
    pullers.append(puller)
    puller.resolved = {"t/0": 3_000_000, "t/1": 4_000_000}
    puller.checkpoints = {"t/0": 1_000_000}
    puller.start()

    def status() -> dict[str, Any]:
        with CoordinatorClient(leader.url, TOKEN) as api:
            result: dict[str, Any] = api.get_feed(name)["status"]
        return result

    first = wait_for(lambda: (s := status())["resolved_ts_us"] and s, 10, "resolved_ts known")
    assert (first["resolved_ts_us"], first["checkpoint_ts_us"]) == (3_000_000, 0)
    assert first["consistency_ts_us"] == 0  # t/1 has no checkpoint yet

    puller.checkpoints = {"t/0": 2_000_000, "t/1": 2_500_000}
    wait_for(lambda: status()["consistency_ts_us"] == 2_000_000, 10, "consistency_ts 2 s")
    puller.checkpoints = {"t/0": 1_500_000, "t/1": 2_500_000}  # a puller going back...
    wait_for(lambda: status()["checkpoint_ts_us"] == 1_500_000, 10, "checkpoint_ts lower")
    assert status()["consistency_ts_us"] == 2_000_000  # ...never moves consistency_ts back
    wait_for(
        lambda: (
            leader.metric("crossfeed_coordinator_consistency_timestamp_seconds", {"feed": name})
            == 2.0
        ),
        5,
        "the consistency_ts metric at 2 s",
    )

    puller.last_error = "target topic x has 1 partition(s) but source topic x has 3"
    errored = wait_for(lambda: (s := status())["state"] == "error" and s, 10, "state error")
    assert errored["last_error"] == f"{puller.instance_id}: {puller.last_error}"
    puller.last_error = ""
    wait_for(lambda: status()["state"] == "normal", 10, "state normal again")
    assert f"changefeed {name} is now error" in leader.log_text()


def test_a_late_write_with_an_old_epoch_is_ignored(
    clusters: Clusters, group: Coordinators, name: str, pullers: list[SimulatedPuller]
) -> None:
    """Even if a deposed leader's write got into the log, readers would ignore it."""
    leader = group.settle()
    create_feed(leader.url, name, 2)
    pullers.append(SimulatedPuller(clusters, f"{name}-p", name).start())
    with AssignmentReader(clusters, name) as reader:
        mine = reader.wait_tasks(lambda t: len(t) == 1, 15, "tasks assigned")
        epoch = max(r["epoch"] for r in reader.applied)
        assert epoch >= 2  # earlier tests ran earlier leaders
        stale = Assignment(name, "puller", pullers[0].instance_id, epoch - 1, 999, frozenset())
        producer = clients.producer(clusters.b.config)
        producer.produce(topics.STATE, key=stale.key.encode(), value=stale.encode())
        producer.flush(10)
        wait_for(lambda: reader.ignored, 10, "the stale write read and ignored")
        assert reader.tasks() == mine
        producer.produce(topics.STATE, key=stale.key.encode(), value=None)  # tidy up
        producer.flush(10)
    time.sleep(1)
    with CoordinatorClient(leader.url, TOKEN) as api:
        status = api.get_feed(name)["status"]
    assert {t["owner"] for t in status["tasks"]} == {pullers[0].instance_id}
    assert status["generation"] != 999
