"""crossfeed against secured clusters: dc-a and dc-b speak only SASL_SSL with SCRAM-SHA-512
to their clients, with certificates of a CA made for the test session — the pair
``crossfeed local up --secure`` starts (the ``secure`` fixture, ``tests/support/secured.py``),
its password read through the ``${file:}`` reference of the configuration it writes.

A mirror feed created through a coordinator's REST API is run by a real puller and copies
every record exactly once; a consumer group that committed on dc-a is moved to dc-b by
``crossfeed failover`` after dc-a is killed. Every client involved — coordinator, puller,
translator, the CLI — gets its security properties from the configuration file alone.

A wrong password, a CA the client does not know, and a plaintext client against the TLS
listener each give one line naming the cluster alias, the listener and the likely fix:
in a puller's log (ERROR) and ``/status``; a coordinator whose control cluster refuses it
exits with that line.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)
from typer.testing import CliRunner

from crossfeed.cli.main import app as cli
from crossfeed.core.provenance import src_of
from crossfeed.feeds import load_feed_file
from crossfeed.kafka import clients
from crossfeed.local.secure import make_certs
from tests.integration.test_coordinator_mirror import start_coordinated
from tests.integration.test_coordinator_process import (
    CoordinatorProcess,
    Coordinators,
    create_feed,
    wait_for,
)
from tests.integration.test_failover import committed, failover_cli, failover_routes
from tests.support.clusters import Clusters
from tests.support.secured import add_user
from tests.support.services import ServiceProcess
from tests.support.verify import read_many, verify_mirror
from tests.support.workload import ContinuousProducer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


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
            src = src_of(r.headers)
            if src:
                out.setdefault((topic, partition), {})[src.offset] = r.offset
    return out


def test_local_up_secure_writes_the_password_by_reference(
    secure: Clusters, secure_home: Path
) -> None:
    """The configuration ``crossfeed local up --secure`` writes names the password file,
    never the password; the file is the user's alone; the brokers refuse plain clients."""
    written = (secure_home / "local.yaml").read_text()
    password_file = secure_home / "secure" / "crossfeed.password"
    password = password_file.read_text().strip()
    assert password and password == secure.a.config["sasl.password"]
    assert password not in written
    assert f"sasl.password: ${{file:{password_file}}}" in written
    assert password_file.stat().st_mode & 0o077 == 0
    for cluster in (secure.a, secure.b):
        assert cluster.config["security.protocol"] == "SASL_SSL"
        plain = {"bootstrap.servers": cluster.bootstrap, "security.protocol": "PLAINTEXT"}
        assert clients.cluster_id(plain, 3.0) is None, cluster.alias


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
        create_feed(leader.url, name, 2, [topic])
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
        secure.start("dc-a")  # for the tests after this one


# -- a misconfigured client says why, once, naming the cluster, listener and fix -----------

MISTAKES = {
    # case: (what the operator got wrong in dc-a's properties, words of the fix)
    "wrong password": ({"sasl.password": "not-the-password"}, "dc-a.sasl.password"),
    "unknown CA": ({"ssl.ca.location": "OTHER_CA"}, "dc-a.ssl.ca.location"),
    "plaintext against TLS": (
        {"security.protocol": "PLAINTEXT", "sasl.mechanism": None, "sasl.username": None},
        "dc-a.security.protocol to SSL or SASL_SSL",
    ),
}


def misconfigured(good: dict[str, Any], mistake: dict[str, Any], other_ca: Path) -> dict[str, Any]:
    conf = {**good, **mistake}
    if conf.get("ssl.ca.location") == "OTHER_CA":
        conf["ssl.ca.location"] = str(other_ca)
    if conf["security.protocol"] == "PLAINTEXT":  # a plain client has no SASL or TLS settings
        conf = {"bootstrap.servers": good["bootstrap.servers"], "security.protocol": "PLAINTEXT"}
    return {k: v for k, v in conf.items() if v is not None}


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that did not sign the brokers' certificates."""
    return make_certs(tmp_path_factory.mktemp("other-ca")).ca


@pytest.mark.parametrize("case", sorted(MISTAKES))
def test_a_puller_that_cannot_log_in_says_why_in_its_log_and_status(
    secure: Clusters, other_ca: Path, tmp_path: Path, case: str
) -> None:
    mistake, fix = MISTAKES[case]
    bad = misconfigured(secure.a.config, mistake, other_ca)
    config = tmp_path / "crossfeed.yaml"
    config.write_text(
        yaml.safe_dump(
            {"clusters": {"dc-a": bad, "dc-b": secure.b.config}, "control_cluster": "dc-b"}
        )
    )
    feed_file = tmp_path / "feed.yaml"
    feed_file.write_text(
        yaml.safe_dump({"name": "locked-out", "source": "dc-a", "sink-uri": "kafka://dc-b",
                        "topics": ["anything"]})
    )  # fmt: skip
    puller = ServiceProcess(
        "puller", feed="locked-out", feed_file=feed_file, config_file=config, workdir=tmp_path
    )
    listener = f"cluster dc-a (listener {secure.a.bootstrap}, "
    try:
        puller.start()
        status = puller.wait_status(
            lambda s: listener in (s.get("last_error") or ""), 45, f"saying why ({case})"
        )
        line = status["last_error"]
        assert status["state"] == "error", status
        assert fix in line, line
        assert "\n" not in line
        errors = [row for row in puller.log_text().splitlines() if " ERROR " in row]
        assert any(line in row for row in errors), puller.failure(f"no ERROR line: {line}")
        # Only the configured listener is named: no secret reaches the log.
        assert secure.a.config["sasl.password"] not in puller.log_text()
    finally:
        puller.kill()


def test_a_coordinator_whose_control_cluster_refuses_its_password_exits_saying_so(
    secure: Clusters, tmp_path: Path
) -> None:
    config = tmp_path / "crossfeed.yaml"
    wrong = {**secure.b.config, "sasl.password": "not-the-password"}
    config.write_text(yaml.safe_dump({"clusters": {"dc-b": wrong}, "control_cluster": "dc-b"}))
    proc = CoordinatorProcess("coord-locked-out", config, tmp_path)
    try:
        proc.start()
        code = proc.wait_exit(45)
        assert code == 1, proc.failure(f"exit code {code}")
        text = proc.log_text()
        assert (
            f"control cluster: cluster dc-b (listener {secure.b.bootstrap}, SASL_SSL): "
            "SASL authentication failed for user 'crossfeed'"
        ) in text, proc.failure("no clear line")
        assert "Traceback" not in text, proc.failure("a traceback instead of one line")
    finally:
        proc.kill()


# -- topic ACLs follow the source -----------------------------------------------------------


def _grant(config: dict[str, Any], *bindings: AclBinding) -> None:
    admin = clients.admin(config)  # the super user; kept until the futures complete
    for future in admin.create_acls(list(bindings)).values():
        future.result(30)


def _topic_acls(config: dict[str, Any], topic: str) -> set[tuple[str, str, str]]:
    admin = clients.admin(config)
    found = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            None,
            None,
            AclOperation.ANY,
            AclPermissionType.ANY,
        )
    ).result(30)
    return {(b.principal, b.operation.name, b.permission_type.name) for b in found}


def test_read_acls_are_copied_and_a_consumer_with_only_read_reads_the_target_after_failover(
    secure: Clusters, tmp_path: Path, services: Any
) -> None:
    a, b = secure.a.config, secure.b.config
    topic = create_topic(a, 2)
    suffix = uuid.uuid4().hex[:6]
    reader, writer = f"reader-{suffix}", f"writer-{suffix}"
    group = f"acl-app-{suffix}"
    readers = {c.alias: add_user(c, reader, "reader-secret") for c in (secure.a, secure.b)}
    for cluster in (secure.a, secure.b):
        add_user(cluster, writer, "writer-secret")
    literal, allow = ResourcePatternType.LITERAL, AclPermissionType.ALLOW
    _grant(
        a,
        AclBinding(
            ResourceType.TOPIC, topic, literal, f"User:{reader}", "*", AclOperation.READ, allow
        ),
        AclBinding(
            ResourceType.TOPIC, topic, literal, f"User:{writer}", "*", AclOperation.WRITE, allow
        ),
    )
    # Group rights are the operator's on both sides (crossfeed copies topic ACLs only).
    for config in (a, b):
        _grant(
            config,
            AclBinding(
                ResourceType.GROUP, group, literal, f"User:{reader}", "*", AclOperation.READ, allow
            ),
        )
    producer = clients.producer(a)
    for n in range(200):
        producer.produce(topic, key=b"%d" % n, value=b"v%d" % n, partition=n % 2)
    producer.flush(30)

    feed = services.start_feed(
        "acls", secure, [topic], settings={"puller": {"config_sync_interval_s": 2}}
    )
    read_many(b, [topic], expect=200, timeout_s=60)
    wait_for(
        lambda: (f"User:{reader}", "READ", "ALLOW") in _topic_acls(b, topic),
        30,
        "the READ ACL copied to the target topic",
    )
    target_acls = _topic_acls(b, topic)
    assert not any(principal == f"User:{writer}" for principal, _, _ in target_acls), target_acls
    assert "ACL copied to target topic" in feed.pullers[0].log_text()

    # The reader reads and commits on dc-a; its group is translated to dc-b.
    consume_and_commit(readers["dc-a"], topic, group, 150)  # 100 a partition: both read
    on_a = committed(a, group)
    assert set(on_a) == {(topic, 0), (topic, 1)} and sum(on_a.values()) == 150
    spec = load_feed_file(feed.feed_file)
    with failover_routes(secure, [spec]) as (url, _loop):
        wait_for(lambda: committed(b, group) == on_a, 60, "the group translated to dc-b")
        feed.stop_all()
        report = failover_cli(feed, url)
        assert report["source_reachable"]
    consumer = Consumer({**readers["dc-b"], "group.id": group, "enable.partition.eof": True})
    consumer.subscribe([topic])
    got: dict[int, list[int]] = {0: [], 1: []}
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while at_end != {0, 1}:
            assert time.monotonic() < deadline, (got, at_end)
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None or msg.error().code() == KafkaError._PARTITION_EOF, (
                msg.error()
            )
            if msg.error() is not None:
                at_end.add(msg.partition())
                continue
            src = src_of(msg.headers() or [])
            assert src is not None
            got[msg.partition()].append(src.offset)
    finally:
        consumer.close()
    for partition in (0, 1):
        start = on_a[(topic, partition)]
        assert got[partition] == list(range(start, 100)), partition
