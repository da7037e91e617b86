"""``crossfeed changefeed restart`` against real pullers: the whole feed, then one task.

Each restarted task is taken from its puller (which commits and lets go), assigned again
once let go, and starts over from its committed marks on the target; a producer writes
throughout, and the target must hold every record exactly once.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from crossfeed.cli.main import app
from crossfeed.client.rest import CoordinatorClient
from tests.integration import test_coordinator_process as harness
from tests.integration.test_coordinator_mirror import start_coordinated
from tests.support.clusters import Clusters
from tests.support.services import ServiceProcess
from tests.support.verify import assert_mirrored, read_many, read_topic
from tests.support.workload import ContinuousProducer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def restarted(proc: ServiceProcess, feed: str, since: int) -> tuple[set[int], set[int]]:
    """(tasks released, tasks started) in ``proc``'s log after offset ``since``."""
    text = proc.log_text()[since:]
    released = {int(t) for t in re.findall(rf"task (\d+) of feed {feed} released", text)}
    started = {int(t) for t in re.findall(r"starting task (\d+) \(epoch", text)}
    return released, started


def running(count: int) -> Any:
    return lambda status: len(status.get("tasks", [])) == count


def test_restart_a_feed_and_one_task_loses_and_doubles_nothing(
    clusters: Clusters, topic_factory: Any, tmp_path: Path
) -> None:
    topic = topic_factory(clusters.a, partitions=4)
    name = f"restart-{uuid.uuid4().hex[:8]}"
    group = harness.Coordinators(clusters, tmp_path)
    procs: list[ServiceProcess] = []
    try:
        group.start(1)
        leader = group.settle()
        harness.create_feed(leader.url, name, 4, [topic])
        pullers = [
            start_coordinated("puller", name, n, group.config_file, tmp_path, procs)
            for n in range(2)
        ]
        ids = {p.instance for p in pullers}
        cli = ["--config", str(group.config_file)]
        with (
            harness.AssignmentReader(clusters, name) as reader,
            ContinuousProducer(clusters.a.config, [topic], 300) as live,
        ):
            reader.wait_tasks(harness.balanced(2, 4, ids), 60, "4 tasks on 2 pullers")
            for proc in pullers:
                proc.wait_status(running(2), 30, "running 2 tasks")
            time.sleep(1)

            # the whole feed: every task let go and started again
            marks = [len(p.log_text()) for p in pullers]
            result = CliRunner().invoke(
                app, [*cli, "changefeed", "restart", name, "--server", leader.url]
            )
            assert result.exit_code == 0, result.output
            assert f"restarting 4 task(s): {name}/0, {name}/1, {name}/2, {name}/3" in result.output

            def all_restarted() -> bool:
                seen = [restarted(p, name, m) for p, m in zip(pullers, marks, strict=True)]
                released = set().union(*(r for r, _ in seen))
                started = set().union(*(s for _, s in seen))
                return released == started == {0, 1, 2, 3}

            harness.wait_for(all_restarted, 30, "every task released and started again")
            reader.wait_tasks(harness.balanced(2, 4, ids), 30, "4 tasks on 2 pullers again")
            for proc in pullers:
                proc.wait_status(running(2), 30, "running 2 tasks again")
            assert "let go: assigning it again (restart)" in leader.log_text()
            time.sleep(1)

            # one task: only it moves
            owner = next(p for p in pullers if 1 in reader.tasks()[p.instance])
            marks = [len(p.log_text()) for p in pullers]
            result = CliRunner().invoke(
                app, [*cli, "changefeed", "restart", name, "--task", "1", "--server", leader.url]
            )
            assert result.exit_code == 0, result.output
            harness.wait_for(
                lambda: restarted(owner, name, marks[pullers.index(owner)]) == ({1}, {1}),
                30,
                "task 1 released and started again by its owner",
            )
            other = next(p for p in pullers if p is not owner)
            assert restarted(other, name, marks[pullers.index(other)]) == (set(), set())
            owner.wait_status(running(2), 30, "running its 2 tasks again")
            # the observability conventions on a real puller: build info, commit histogram
            assert owner.metric("crossfeed_build_info", {"role": "puller"}) == 1.0
            commits = owner.metric("crossfeed_puller_transaction_commit_seconds_count")
            assert commits is not None and commits > 0
            time.sleep(2)
        assert_mirrored(clusters, [topic], live.acked, [*procs, *group.procs])
    finally:
        for proc in procs:
            proc.kill()
        harness.remove_feed_quietly(group, name)
        group.stop()


def count(config: dict[str, Any], topic: str) -> int:
    return sum(len(records) for records in read_topic(config, topic).values())


def test_an_update_reaches_running_pullers_and_a_restart_applies_it_to_running_tasks(
    clusters: Clusters, topic_factory: Any, tmp_path: Path
) -> None:
    """Topics added by ``changefeed update`` are copied without restarting anything; a
    topic taken out stops being copied once the feed's tasks restart."""
    kept, added = (topic_factory(clusters.a, partitions=2) for _ in range(2))
    name = f"update-{uuid.uuid4().hex[:8]}"
    group = harness.Coordinators(clusters, tmp_path)
    procs: list[ServiceProcess] = []
    cli = ["--config", str(group.config_file)]
    try:
        group.start(1)
        leader = group.settle()
        harness.create_feed(leader.url, name, 2, [kept])
        json_logs = {"CROSSFEED_LOG_FORMAT": "json"}
        puller = start_coordinated(
            "puller", name, 0, group.config_file, tmp_path, procs, env=json_logs
        )
        puller.wait_status(running(2), 60, "running 2 tasks")
        with ContinuousProducer(clusters.a.config, [kept, added], 200) as live:
            time.sleep(2)
            result = CliRunner().invoke(
                app, [*cli, "changefeed", "update", name, "--topics", kept, "--topics", added,
                      "--server", leader.url],
            )  # fmt: skip
            assert result.exit_code == 0, result.output
            harness.wait_for(
                lambda: f"feed {name} updated" in puller.log_text(), 30, "the puller updated"
            )
            time.sleep(2)
        # the added topic is copied from its start, by the same process, exactly once
        assert_mirrored(clusters, [kept, added], live.acked, [*procs, *group.procs])

        # take `kept` out and restart the tasks: it is no longer copied
        with CoordinatorClient(leader.url, harness.TOKEN) as api:
            feed = api.get_feed(name)["feed"]
            mark = len(puller.log_text())  # before the PUT: the puller may log at once
            api.put_feed(
                {"name": name, "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": [added],
                 "config": feed["config"]}
            )  # fmt: skip
            harness.wait_for(
                lambda: f"feed {name} updated" in puller.log_text()[mark:], 30, "updated again"
            )
            api.restart_feed(name)
        harness.wait_for(
            lambda: restarted(puller, name, mark) == ({0, 1}, {0, 1}), 30, "both tasks restarted"
        )
        copied_before = count(clusters.b.config, kept)
        with ContinuousProducer(clusters.a.config, [kept, added], 200) as more:
            time.sleep(3)
        total_added = len([r for r in [*live.acked, *more.acked] if r.topic == added])
        target = read_many(clusters.b.config, [added], expect=total_added, timeout_s=60)
        assert sum(len(r) for r in target[added].values()) == total_added
        assert count(clusters.b.config, kept) == copied_before  # not copied any more
        # every JSON log line of the puller names its feed and instance
        lines = [json.loads(x) for x in puller.log_text().splitlines() if x.startswith("{")]
        assert len(lines) > 10
        assert {(x["feed"], x["instance"], x["role"]) for x in lines} == {
            (name, puller.instance, "puller")
        }
    finally:
        for proc in procs:
            proc.kill()
        harness.remove_feed_quietly(group, name)
        group.stop()
