"""Without ``control_cluster`` in the configuration, every service picks the same control
cluster (``Settings.control_alias``: the first configured one), so the coordinator sees
the pullers' heartbeats, assigns tasks and the feed runs. (Before, the
coordinator took the first cluster and the workers their feed's target: they never met.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from crossfeed.client.rest import CoordinatorClient
from crossfeed.config import load_settings
from tests.integration.test_coordinator_mirror import start_coordinated
from tests.integration.test_coordinator_process import TOKEN, CoordinatorProcess, wait_for
from tests.support.clusters import Clusters
from tests.support.services import ServiceProcess
from tests.support.verify import assert_mirrored
from tests.support.workload import ContinuousProducer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def test_services_without_control_cluster_meet_on_the_same_one(
    clusters: Clusters, topic_factory: object, tmp_path: Path
) -> None:
    topic = topic_factory(clusters.a, partitions=2)  # type: ignore[operator]
    config = tmp_path / "crossfeed.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                # dc-a first: the default control cluster is the feed's *source* here,
                # not its target — where the workers used to look.
                "clusters": {"dc-a": clusters.a.config, "dc-b": clusters.b.config},
                "api_token": TOKEN,
                "log_level": "INFO",
            }
        )
    )
    assert load_settings(config).control_alias() == "dc-a"
    name = f"ctl-{uuid.uuid4().hex[:8]}"
    coordinator = CoordinatorProcess(f"coord-{name}", config, tmp_path)
    procs: list[ServiceProcess] = [coordinator]
    try:
        coordinator.start()
        wait_for(coordinator.leads, 60, "the coordinator leading")
        with CoordinatorClient(coordinator.url, TOKEN) as api:
            api.create_feed(
                {"name": name, "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": [topic]}
            )
            puller = start_coordinated("puller", name, 0, config, tmp_path, procs)
            puller.wait_status(lambda s: len(s.get("tasks", [])) > 0, 60, "given its tasks")
            with ContinuousProducer(clusters.a.config, [topic], 200) as live:
                wait_for(lambda: len(live.acked) >= 400, 30, "400 records written")
            produced = live.acked
            captures = {c["instance_id"] for c in api.captures()}
            assert puller.instance in captures, captures
            assert_mirrored(clusters, [topic], produced, procs, timeout_s=60)
            api.remove_feed(name)
    finally:
        for proc in procs:
            proc.kill()
