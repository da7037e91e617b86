"""The foundation against real brokers: two independent clusters and PostgreSQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from crossfeed import class_archive
from crossfeed.kafka import clients
from crossfeed.local import postgres, processes, stack
from tests.support.verify import read_topic

pytestmark = pytest.mark.integration


def test_clusters_are_independent(clusters):
    assert clusters.a.cluster_id
    assert clusters.b.cluster_id
    assert clusters.a.cluster_id != clusters.b.cluster_id
    assert clients.cluster_id(clusters.a.config) == clusters.a.cluster_id
    assert clients.cluster_id(clusters.b.config) == clusters.b.cluster_id


def test_produce_10000_and_read_back(clusters, topic_factory, producer_factory):
    topic = topic_factory(clusters.a, partitions=3)
    producer = producer_factory(clusters.a)
    sent = {}
    for i in range(10_000):
        key = f"k{i % 97}".encode()
        producer.produce(topic, key=key, value=f"v{i}".encode(), headers=[("n", str(i).encode())])
        sent[i] = key
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0

    records = read_topic(clusters.a.config, topic, expect=10_000)
    got = [m for msgs in records.values() for m in msgs]
    assert len(got) == 10_000
    # Per partition: offsets are dense and values appear in produce order.
    for msgs in records.values():
        offsets = [m.offset for m in msgs]
        assert offsets == list(range(len(msgs)))
        order = [int(m.value[1:]) for m in msgs]
        assert order == sorted(order)
    values = sorted(int(m.value[1:]) for m in got)
    assert values == list(range(10_000))
    for m in got:
        i = int(m.value[1:])
        assert m.key == sent[i]
        assert list(m.headers) == [("n", str(i).encode())]
    # Nothing leaked to the other data center.
    assert topic not in clients.admin(clusters.b.config).list_topics(timeout=10).topics


def test_the_brokers_start_from_the_class_archive_make_setup_recorded(clusters):
    """make setup records the archives (crossfeed local archive-classes); a broker of the
    stack maps its archive instead of loading its classes one by one."""
    if os.environ.get("CROSSFEED_CLASS_ARCHIVES", "on") == "off":
        pytest.skip("CROSSFEED_CLASS_ARCHIVES=off: the JVMs start without archives")
    archive = class_archive.directory() / "broker.jsa"
    assert archive.is_file(), f"{archive} is missing: make setup did not record it"
    for node in stack.CLUSTERS:
        pid = node.pid()
        assert pid is not None, f"{node.alias} is not running"
        maps = Path(f"/proc/{pid}/maps").read_text()
        assert str(archive) in maps, f"{node.alias} (pid {pid}) runs without {archive}"


def test_postgres_answers(postgres):
    assert postgres.execute("SELECT 1").fetchone() == (1,)
    postgres.execute("CREATE TABLE t (id int primary key)")
    postgres.execute("INSERT INTO t VALUES (1)")
    assert postgres.execute("SELECT count(*) FROM t").fetchone() == (1,)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crossfeed.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_status_and_losing_one_data_center(clusters):
    if clusters.backend != "local":
        pytest.skip("needs the local stack")
    status = _cli("local", "status")
    assert status.returncode == 0, status.stderr
    assert clusters.a.cluster_id in status.stdout
    assert clusters.b.cluster_id in status.stdout

    stopped = _cli("local", "stop", "dc-a", "--kill")
    assert stopped.returncode == 0, stopped.stderr
    try:
        assert clients.cluster_id(clusters.a.config, 2.0) is None
        assert clients.cluster_id(clusters.b.config) == clusters.b.cluster_id
        after = _cli("local", "status")
        assert "stopped" in after.stdout.splitlines()[0]
    finally:
        started = _cli("local", "start", "dc-a")
    assert started.returncode == 0, started.stderr
    # Same data center back: same cluster id, data kept.
    assert clients.cluster_id(clusters.a.config) == clusters.a.cluster_id


def test_up_twice_is_harmless(clusters):
    if clusters.backend != "local":
        pytest.skip("needs the local stack")
    again = _cli("local", "up")
    assert again.returncode == 0, again.stderr
    assert clusters.a.cluster_id in again.stdout


def test_active_active_restarts_a_server_running_without_its_settings(clusters):
    """``local up --active-active`` on a data directory started before without it: the
    target PostgreSQL is restarted with wal_level=logical and track_commit_timestamp=on,
    once (a second time finds them there)."""
    if clusters.backend != "local":
        pytest.skip("needs the local stack")
    plain, paired = postgres.target(), postgres.target(active_active=True)
    found = paired if not paired.settings_missing() else plain
    plain.restart()  # as 'crossfeed local up' without the flag starts it
    assert processes.wait_until(plain.answers, 30)
    assert paired.settings_missing() == {"wal_level": "replica", "track_commit_timestamp": "off"}
    try:
        assert stack._settle(paired) is True
        assert paired.settings_missing() == {}
        assert stack._settle(paired) is False  # already there: no second restart
        status = _cli("local", "status")
        [line] = [x for x in status.stdout.splitlines() if x.startswith("postgres ")]
        assert "(active-active ready)" in line
    finally:
        found.restart()  # leave it as the session found it
        assert processes.wait_until(found.answers, 30)
