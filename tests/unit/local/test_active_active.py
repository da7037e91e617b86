"""``crossfeed local up --active-active``: what the two PostgreSQL servers start with and
how the dc-b Connect worker differs from dc-a's (no process is started here)."""

from __future__ import annotations

from crossfeed.local import postgres, stack


def test_both_servers_of_a_pair_start_captured_and_with_commit_timestamps() -> None:
    for server in (postgres.target(active_active=True), postgres.source(active_active=True)):
        assert server.settings["wal_level"] == "logical"
        assert server.settings["track_commit_timestamp"] == "on"
    # Without the flag: the target as before (no option); the source is captured anyway.
    assert postgres.target().settings == {}
    assert postgres.source().settings["wal_level"] == "logical"


def test_the_dc_b_worker_has_its_own_cluster_port_group_topics_and_files() -> None:
    a, b = stack.connect_worker(), stack.connect_worker_b()
    props_a = dict(line.split("=", 1) for line in a.properties().splitlines() if "=" in line)
    props_b = dict(line.split("=", 1) for line in b.properties().splitlines() if "=" in line)
    assert props_a["bootstrap.servers"] == stack.CLUSTERS[0].bootstrap
    assert props_b["bootstrap.servers"] == stack.CLUSTERS[1].bootstrap
    for key in (
        "group.id",
        "config.storage.topic",
        "offset.storage.topic",
        "status.storage.topic",
        "listeners",
    ):
        assert props_a[key] != props_b[key], key
    assert a.port != b.port and a.dir != b.dir and a.log_file != b.log_file
    assert props_a["config.storage.topic"] == "_connect.configs"  # dc-a's as before
