"""Leadership on the real clusters: two real coordinator processes, simulated pullers
(real heartbeats); kill -9 and SIGSTOP/SIGCONT of the leader, and writer fencing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from crossfeed.client.rest import CoordinatorClient
from crossfeed.kafka import clients
from crossfeed.services.coordinator.store import StateStore
from crossfeed.services.coordinator.writer import Fenced, StateWriter
from crossfeed.wire import codec, topics
from tests.integration.test_coordinator_process import (
    FAILOVER_S,
    TOKEN,
    AssignmentReader,
    Coordinators,
    SimulatedPuller,
    balanced,
    coordinator_group,
    create_feed,
    remove_feed_quietly,
    wait_for,
)
from tests.support.clusters import Clusters

pytestmark = pytest.mark.integration


@pytest.fixture
def group(clusters: Clusters, tmp_path: Path) -> Iterator[Coordinators]:
    yield from coordinator_group(clusters, tmp_path, 2)


@pytest.fixture
def name(group: Coordinators) -> Iterator[str]:
    feed = f"ha-{uuid.uuid4().hex[:8]}"
    yield feed
    remove_feed_quietly(group, feed)


@pytest.fixture
def pullers(clusters: Clusters) -> Iterator[list[SimulatedPuller]]:
    started: list[SimulatedPuller] = []
    yield started
    for puller in started:
        puller.leave()


def test_kill_9_of_the_leader_a_standby_leads_within_the_failover_timeout(
    clusters: Clusters, group: Coordinators, name: str, pullers: list[SimulatedPuller]
) -> None:
    leader = group.settle()
    standby = group.standbys(leader)[0]
    create_feed(leader.url, name, 4)
    pullers.extend(SimulatedPuller(clusters, f"{name}-p{n}", name).start() for n in range(2))
    ids = {p.instance_id for p in pullers}
    with AssignmentReader(clusters, name) as reader:
        before = reader.wait_tasks(balanced(2, 4, ids), 15, "4 tasks on 2 pullers")
        old_epoch = max(r["epoch"] for r in reader.applied)

        killed = time.monotonic()
        leader.kill()
        wait_for(standby.leads, FAILOVER_S + 5, "the standby leading", every=0.05)
        took = time.monotonic() - killed
        assert took < FAILOVER_S, f"standby led {took:.1f}s after kill -9"

        # the new leader re-issues every task under its epoch, moving none
        ha = standby.ha()
        assert ha is not None and ha["epoch"] > old_epoch
        reissued = reader.wait_tasks(
            lambda t: (
                t == before and all(r["epoch"] == ha["epoch"] for r in reader.current.values())
            ),
            5,
            "tasks re-issued under the new epoch",
        )
        assert reissued == before
    assert standby.metric("crossfeed_coordinator_failovers_total") == 1.0
    # the takeover's duration: from the old leader's last renewal to the new lease
    assert standby.metric("crossfeed_coordinator_leader_failover_seconds_count") == 1.0
    gap = standby.metric("crossfeed_coordinator_leader_failover_seconds_sum")
    assert gap is not None and 0 < gap < FAILOVER_S + 1
    assert standby.metric("crossfeed_coordinator_lease_expired_total") == 1.0
    with CoordinatorClient(standby.url, TOKEN) as api:
        assert api.pause_feed(name)["state"] == "paused"
    assert "became leader: acquire epoch" in standby.log_text()


def test_a_paused_leader_is_deposed_and_changes_nothing(
    clusters: Clusters, group: Coordinators, name: str, pullers: list[SimulatedPuller]
) -> None:
    old = group.settle()
    new = group.standbys(old)[0]
    create_feed(old.url, name, 4)
    pullers.extend(SimulatedPuller(clusters, f"{name}-p{n}", name).start() for n in range(2))
    ids = {p.instance_id for p in pullers}
    with AssignmentReader(clusters, name) as reader:
        reader.wait_tasks(balanced(2, 4, ids), 15, "4 tasks on 2 pullers")
        old_epoch = max(r["epoch"] for r in reader.applied)
        start = store_end(clusters)

        old.pause()  # SIGSTOP: no heartbeats, no renewals, no writes
        paused = time.monotonic()
        wait_for(new.leads, FAILOVER_S + 5, "the standby leading", every=0.05)
        assert time.monotonic() - paused < FAILOVER_S + 1
        pullers[1].go_silent()  # the new leader has work to do while the old one sleeps
        survivor = {pullers[0].instance_id}
        reader.wait_tasks(balanced(1, 4, survivor), FAILOVER_S + 5, "tasks moved")

        old.resume()  # SIGCONT: its lease expired long ago
        wait_for(
            lambda: (
                (h := old.ha()) is not None
                and h["role"] == "standby"
                and h["leader"] == new.instance
            ),
            10,
            "the old leader following the new one",
        )
        time.sleep(2)  # give it ticks in which it could misbehave
        assert new.leads()
        assert "stepping down as leader of epoch" in old.log_text()
        assert old.metric("crossfeed_coordinator_role") == 0.0
        assert not reader.ignored
        assert reader.tasks() == {pullers[0].instance_id: {0, 1, 2, 3}}
    # nothing the old leader wrote after the new epoch began is in the log
    epochs = epochs_written_since(clusters, start)
    new_epoch = max(epochs)
    assert new_epoch > old_epoch
    first_new = epochs.index(new_epoch)
    assert all(e == new_epoch for e in epochs[first_new:]), epochs


def test_a_fenced_writer_commits_nothing(clusters: Clusters) -> None:
    """Two state writers: opening the second fences the first (Kafka transactions)."""
    conf = dict(clusters.b.config)
    store = StateStore(conf).start()
    try:
        assert store.sync(30)
        first, second = StateWriter(conf, store, 10_000), StateWriter(conf, store, 10_000)
        key = f"test/{uuid.uuid4().hex}"
        first.open()
        first.write([(key, b"first")], guard=lambda: True)
        second.open()
        with pytest.raises(Fenced):
            first.write([(key, b"late")], guard=lambda: True)
        assert not first.is_open
        second.write([(key, b"second")], guard=lambda: True)
        second.close()
    finally:
        store.stop()
    values = [v for k, v in read_state(clusters) if k == key]
    assert values == [b"first", b"second"]


def test_a_leader_fenced_by_a_losing_rival_serves_requests_meanwhile(
    clusters: Clusters, group: Coordinators, name: str
) -> None:
    """Two coordinators started together race for the lease: the loser opens its writer
    (which fences the leader's) just before it sees the winner's lease. The leader finds
    out at its next lease renewal and takes the writer back in that same step, its lease
    still live: it never stops answering as leader (a tick-long gap used to refuse
    requests with 503, as CI saw right after a pair of coordinators started)."""

    leader = group.settle()
    create_feed(leader.url, name, 1)
    store = StateStore(dict(clusters.b.config)).start()
    rival = StateWriter(dict(clusters.b.config), store, 10_000)
    roles = []
    try:
        assert store.sync(30)
        retaken = leader.log_text().count(RETAKEN)  # start-up races may have fenced it
        rival.open()  # what the losing candidate does: fences the leader's writer
        # No mutation now, so the leader's own lease renewal finds the fence.
        deadline = time.monotonic() + FAILOVER_S
        while leader.log_text().count(RETAKEN) == retaken:
            assert time.monotonic() < deadline, "the leader never found its writer fenced"
            roles.append((leader.ha() or {}).get("role"))
    finally:
        rival.close()
        store.stop()
    assert set(roles) == {"leader"}, roles  # never a gap
    reply = httpx.post(
        f"{leader.url}/v1/changefeeds/{name}/pause",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["state"] == "paused"


RETAKEN = "took the state writer back"


# -- reading _crossfeed.state as a committed reader does -----------------------------------


def read_state(clusters: Clusters, start: int = 0) -> list[tuple[str, bytes | None]]:
    consumer = clients.consumer(clusters.b.config, **{"group.id": f"check-{uuid.uuid4().hex}"})
    tp = TopicPartition(topics.STATE, 0, start or OFFSET_BEGINNING)
    consumer.assign([tp])
    end = store_end(clusters)
    out: list[tuple[str, bytes | None]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for msg in consumer.consume(1000, timeout=0.2):
            if not msg.error():
                out.append(((msg.key() or b"").decode(), msg.value()))
        if consumer.position([TopicPartition(topics.STATE, 0)])[0].offset >= end:
            break
    consumer.close()
    return out


def store_end(clusters: Clusters) -> int:
    consumer = clients.consumer(clusters.b.config, **{"group.id": "check"})
    _, high = consumer.get_watermark_offsets(TopicPartition(topics.STATE, 0), timeout=10)
    consumer.close()
    return int(high)


def epochs_written_since(clusters: Clusters, start: int) -> list[int]:
    """Leader epochs carried by the status and assignment records after ``start``."""
    epochs = []
    for key, value in read_state(clusters, start):
        if value is None:
            continue
        if key.startswith("assignment/"):
            epochs.append(codec.decode("Assignment", value)["epoch"])
        elif key.startswith("status/"):
            epochs.append(codec.decode("FeedStatus", value)["leader_epoch"])
    return epochs


def test_the_cli_works_through_a_standby_and_while_any_listed_coordinator_lives(
    group: Coordinators, name: str
) -> None:
    """``--server`` lists both coordinators; the first is the standby, then it is dead:
    status and mutations are answered all along (forwarded by the standby, then by the
    leader the CLI falls over to)."""
    from typer.testing import CliRunner

    from crossfeed.cli.main import app

    leader = group.settle()
    standby = group.standbys(leader)[0]
    servers = f"{standby.url},{leader.url}"

    def cli(*args: str) -> str:
        result = CliRunner().invoke(
            app,
            ["--config", str(group.config_file), *args, "--server", servers],
            terminal_width=200,
        )
        assert result.exit_code == 0, result.output
        return result.output

    created = cli("changefeed", "create", name, "--source", "dc-a", "--sink-uri",
                  "kafka://dc-b", "--topics", f"{name}-.*")  # fmt: skip
    assert f"created changefeed {name}" in created
    status = cli("status")
    assert f"asked {standby.instance}" in status and name in status  # the standby answered
    assert f"changefeed {name} is paused" in cli("changefeed", "pause", name)
    with CoordinatorClient(standby.url, TOKEN) as api:
        assert api.get_feed(name)["feed"]["state"] == "paused"  # stored by the leader

    standby.kill()
    status = cli("status")
    assert f"asked {leader.instance}" in status and name in status
    assert f"changefeed {name} is normal" in cli("changefeed", "resume", name)
    assert leader.alive

    # now the first one listed is the leader, and it dies: the other answers at once,
    # and takes changes once it leads
    (fresh,) = group.start(1)
    group.settle()
    servers = f"{leader.url},{fresh.url}"
    leader.kill()
    status = cli("status")
    assert f"asked {fresh.instance}" in status and name in status
    wait_for(fresh.leads, FAILOVER_S + 10, "the remaining coordinator leading")
    assert f"changefeed {name} is paused" in cli("changefeed", "pause", name)
