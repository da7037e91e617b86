"""crossfeed against secured clusters: dc-a and dc-b speak only SASL_SSL with SCRAM-SHA-512
to their clients, with certificates of a CA made for the test session
(``tests/support/secured.py``, ``crossfeed/local/secure.py``).

A mirror feed created through a coordinator's REST API is run by a real puller and copies
every record exactly once; a consumer group that committed on dc-a is moved to dc-b by
``crossfeed failover`` after dc-a is killed. Every client involved — coordinator, puller,
translator, the CLI — gets its security properties from the configuration file alone.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import NewTopic
from typer.testing import CliRunner

from crossfeed.cli.main import app as cli
from crossfeed.core.provenance import parse_src
from crossfeed.kafka import clients
from crossfeed.wire import headers
from tests.integration.test_coordinator_mirror import create_mirror_feed, start_coordinated
from tests.integration.test_coordinator_process import Coordinators, wait_for
from tests.integration.test_failover import committed
from tests.support.clusters import Clusters
from tests.support.secured import secured_pair
from tests.support.services import ServiceProcess
from tests.support.verify import read_many, verify_mirror
from tests.support.workload import ContinuousProducer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    with secured_pair(tmp_path_factory.mktemp("secured")) as pair:
        yield pair


def create_topic(config: dict[str, Any], partitions: int) -> str:
    name = f"sec-{uuid.uuid4().hex[:8]}"
    admin = clients.admin(config)  # kept until the future completes
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)
    return name


def consume_and_commit(config: dict[str, Any], topic: str, group: str, count: int) -> None:
    """Read ``count`` records of ``topic`` as ``group`` and commit them, like an app."""
    consumer = Consumer(
        {**config, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    try:
        while seen < count:
            assert time.monotonic() < deadline, f"consumed {seen} of {count}"
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            seen += 1
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def copy_offsets(config: dict[str, Any], topic: str) -> dict[tuple[str, int], dict[int, int]]:
    """Per target partition: source offset -> offset of its copy."""
    out: dict[tuple[str, int], dict[int, int]] = {}
    for partition, records in read_many(config, [topic])[topic].items():
        for r in records:
            src = r.header(headers.SRC)
            if src:
                out.setdefault((topic, partition), {})[parse_src(src).offset] = r.offset
    return out


def test_mirror_feed_coordinator_and_failover_over_sasl_ssl(
    secure: Clusters, tmp_path: Path
) -> None:
    a, b = secure.a.config, secure.b.config
    assert a["security.protocol"] == b["security.protocol"] == "SASL_SSL"
    topic = create_topic(a, 3)
    name = f"secure-{uuid.uuid4().hex[:6]}"
    group_id = f"app-{uuid.uuid4().hex[:6]}"
    coordinators = Coordinators(secure, tmp_path)
    procs: list[ServiceProcess] = []
    try:
        coordinators.start(1)
        leader = coordinators.settle(60)
        create_mirror_feed(leader.url, name, [topic], tasks=2)
        procs.append(start_coordinated("puller", name, 0, coordinators.config_file, tmp_path, []))
        with ContinuousProducer(a, [topic], 300) as live:
            time.sleep(2)  # ~600 records, ~200 a partition
        produced = live.acked
        assert len(produced) >= 300
        target = read_many(b, [topic], expect=len(produced), timeout_s=90)
        verify_mirror(
            read_many(a, [topic]),
            target,
            source_cluster_id=secure.a.cluster_id,
            target_cluster_id=secure.b.cluster_id,
        ).assert_ok(procs[0].describe())

        # A group commits on dc-a; then dc-a is lost and the operator fails over.
        # 50 of ~200 per partition: every committed offset has a record, so a copy.
        consume_and_commit(a, topic, group_id, 50)
        on_a = committed(a, group_id)
        assert on_a and sum(on_a.values()) == 50, on_a
        secure.stop("dc-a")
        procs[0].kill()
        runner = CliRunner()
        result = runner.invoke(
            cli,
            [
                *("--config", str(coordinators.config_file), "failover", "--feed", name),
                *("--server", leader.url, "--json"),
            ],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        report = json.loads(result.stdout)
        # Moved now, or already by the commit stream (exact translation, nothing left).
        groups = {g["group"]: g for g in report["groups"]}
        assert group_id in report["moved"] or group_id in groups, json.dumps(report, indent=1)

        copies = copy_offsets(b, topic)
        expected = {tp: copies[tp][offset] for tp, offset in on_a.items()}
        on_b = wait_for(lambda: committed(b, group_id) == expected, 30, "the group on dc-b")
        assert on_b, (committed(b, group_id), expected)
        # The group resumes on dc-b where it stopped: the next record is the copy of dc-a's
        # next one, for every partition.
        consumer = Consumer({**b, "group.id": group_id, "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(t, p) for t, p in expected])
            positions = consumer.committed([TopicPartition(t, p) for t, p in expected], 30)
        finally:
            consumer.close()
        assert {(tp.topic, tp.partition): tp.offset for tp in positions} == expected
    finally:
        for proc in procs:
            proc.kill()
        coordinators.stop()
