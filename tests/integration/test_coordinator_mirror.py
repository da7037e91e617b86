"""End to end: a mirror feed created through the REST API and run by real pullers that take
their tasks from the coordinator, while the leader coordinator and a puller are killed
with kill -9. Nothing may be lost or duplicated."""

from __future__ import annotations

import re
import sys
import time
import uuid
from pathlib import Path

import pytest

from crossfeed.client.rest import CoordinatorClient
from tests.integration.test_coordinator_process import (
    FAILOVER_S,
    TOKEN,
    AssignmentReader,
    Coordinators,
    balanced,
    remove_feed_quietly,
    wait_for,
)
from tests.support.clusters import Clusters
from tests.support.services import ServiceProcess
from tests.support.verify import read_many, verify_mirror
from tests.support.workload import ContinuousProducer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


class CoordinatedProcess(ServiceProcess):
    """``crossfeed <role> run --feed F`` without a feed file: the feed comes from
    ``_crossfeed.state`` and (for pullers) the tasks from the coordinator."""

    @property
    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "crossfeed.cli.main",
            "--config",
            str(self.config_file),
            self.role,
            "run",
            "--feed",
            self.feed,
            "--metrics-port",
            str(self.port),
            "--instance",
            self.instance,
        ]


def start_coordinated(
    role: str,
    feed: str,
    n: int,
    config_file: Path,
    workdir: Path,
    procs: list[ServiceProcess],
    failover_s: float | None = FAILOVER_S,
) -> ServiceProcess:
    """Instance ``n`` of ``role`` for ``feed``, started and added to ``procs`` (a stable
    instance id: static group membership for sinks)."""
    env = {}
    if failover_s is not None:
        # sinks share partitions by consumer group: 6 s is the broker's minimum session
        env["CROSSFEED_COORDINATOR__FAILOVER_TIMEOUT_S"] = str(failover_s)
    proc = CoordinatedProcess(
        role,
        feed=feed,
        feed_file=Path("-"),
        config_file=config_file,
        workdir=workdir,
        instance=f"{role}-{feed}-{n}",
        env=env,
    )
    procs.append(proc.start())
    return proc


def create_mirror_feed(url: str, name: str, topics: list[str], tasks: int) -> None:
    """A dc-a -> dc-b mirror feed of ``topics`` with ``tasks`` puller tasks, over REST."""
    with CoordinatorClient(url, TOKEN) as api:
        api.create_feed(
            {
                "name": name,
                "source": "dc-a",
                "sink-uri": "kafka://dc-b",
                "topics": topics,
                "config": {"staging.partitions": str(tasks)},
            }
        )


def test_mirror_feed_survives_kill_9_of_the_leader_and_of_a_puller(
    clusters: Clusters, topic_factory: object, tmp_path: Path
) -> None:
    make_topic = topic_factory  # tests/conftest.py: topic_factory(cluster, partitions=N)
    names = [make_topic(clusters.a, partitions=4) for _ in range(2)]  # type: ignore[operator]
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    group = Coordinators(clusters, tmp_path)
    procs: list[ServiceProcess] = []

    def start(role: str, n: int) -> ServiceProcess:
        return start_coordinated(role, name, n, group.config_file, tmp_path, procs)

    try:
        group.start(2)
        leader = group.settle()
        standby = group.standbys(leader)[0]
        create_mirror_feed(leader.url, name, names, tasks=6)
        pullers = [start("puller", n) for n in range(3)]
        ids = {p.instance for p in pullers}
        with (
            AssignmentReader(clusters, name) as reader,
            ContinuousProducer(clusters.a.config, names, 400) as live,
        ):
            reader.wait_tasks(balanced(3, 6, ids), 60, "6 tasks on 3 real pullers")
            time.sleep(1)

            leader.kill()
            killed = time.monotonic()
            wait_for(standby.leads, FAILOVER_S + 5, "the standby leading", every=0.05)
            assert time.monotonic() - killed < FAILOVER_S

            victim = pullers[0]
            victim.kill()
            killed = time.monotonic()
            rest = ids - {victim.instance}
            reader.wait_tasks(balanced(2, 6, rest), FAILOVER_S + 5, "the victim's tasks moved")
            assert time.monotonic() - killed < FAILOVER_S + 2
            for proc in pullers[1:]:
                proc.wait_status(lambda s: len(s.get("tasks", [])) == 3, 30, "running its 3 tasks")
            time.sleep(2)
        produced = live.acked
        source = read_many(clusters.a.config, names)
        target = read_many(clusters.b.config, names, expect=len(produced), timeout_s=120)
        logs = "\n".join(f"  {p.describe()}" for p in [*procs, *group.procs])
        verify_mirror(
            source,
            target,
            source_cluster_id=clusters.a.cluster_id,
            target_cluster_id=clusters.b.cluster_id,
        ).assert_ok(logs)
    finally:
        for proc in procs:
            proc.kill()
        remove_feed_quietly(group, name)
        group.stop()


def test_a_puller_woken_after_sigstop_starts_only_what_the_newest_assignment_gives_it(
    clusters: Clusters, topic_factory: object, tmp_path: Path
) -> None:
    """A paused puller's tasks move to another; on SIGCONT it must read the newest
    assignment before starting anything, rather than take a moved task back from the
    assignment it held when paused (which fences the task's new owner: churn). It may get
    tasks again — it is alive, and the leader balances — but only from a newer one."""
    make_topic = topic_factory
    topic = make_topic(clusters.a, partitions=4)  # type: ignore[operator]
    name = f"woken-{uuid.uuid4().hex[:8]}"
    group = Coordinators(clusters, tmp_path)
    procs: list[ServiceProcess] = []

    def start(n: int) -> ServiceProcess:
        return start_coordinated("puller", name, n, group.config_file, tmp_path, procs)

    try:
        group.start(1)
        leader = group.settle()
        create_mirror_feed(leader.url, name, [topic], tasks=4)
        sleeper, other = start(0), start(1)
        ids = {sleeper.instance, other.instance}
        with (
            AssignmentReader(clusters, name) as reader,
            ContinuousProducer(clusters.a.config, [topic], 200),
        ):
            reader.wait_tasks(balanced(2, 4, ids), 60, "4 tasks on 2 pullers")
            for proc in procs:
                proc.wait_status(lambda s: len(s.get("tasks", [])) == 2, 30, "running 2 tasks")
            sleeper.pause()
            reader.wait_tasks(balanced(1, 4, {other.instance}), FAILOVER_S + 10, "all moved")
            other.wait_status(lambda s: len(s.get("tasks", [])) == 4, 30, "running all 4 tasks")
            moved_in = max(
                r["generation"]
                for r in reader.applied
                if r["instance_id"] == sleeper.instance and not r["partitions"]
            )
            woke_at = len(sleeper.log_text())
            sleeper.resume()
            time.sleep(8)  # it finds its tasks fenced, drops them, and is balanced again
            started = [
                (int(task), int(generation))
                for task, generation in re.findall(
                    r"starting task (\d+) \(epoch \d+, generation (\d+)\)",
                    sleeper.log_text()[woke_at:],
                )
            ]
            stale = [(t, g) for t, g in started if g < moved_in]
            assert not stale, sleeper.failure(
                f"started (task, generation) {stale} from an assignment older than "
                f"generation {moved_in}, which had moved its tasks away"
            )
    finally:
        for proc in procs:
            proc.kill()
        remove_feed_quietly(group, name)
        group.stop()
