"""A consumer group whose position is in records the source deleted before they were
copied, against real brokers (translation/rules.py, rule 0; docs/failover.md).

A feed copies offsets 0-99 of partition 0; every puller stops; 100 more records are
written and a group on dc-a reads up to offset 120 and commits; the source deletes up to
offset 150 (DeleteRecords) and gets 100 more; the puller starts again. Offsets 120-149 are
lost to the group: never copied, gone at the source.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import replace
from typing import Any

import pytest
import yaml
from confluent_kafka import TopicPartition
from prometheus_client import REGISTRY
from typer.testing import CliRunner

from crossfeed.cli.main import app as cli
from crossfeed.core.provenance import src_of
from crossfeed.feeds import load_feed_file
from crossfeed.kafka import clients
from tests.integration.test_coordinator_process import TOKEN, Coordinators
from tests.integration.test_failover import (
    committed,
    consume,
    crossfeed,
    failover_cli,
    failover_routes,
    read_on,
    src_offsets,
    wait_for,
)
from tests.integration.test_mirror_follows import _copied_offsets, _produce, stopped_after_100
from tests.support.verify import read_many

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def _group_in_deleted_records(clusters, services, policy, topic_factory, producer_factory, unique):
    """The scenario of the module docstring; returns (feed, topic, group)."""
    a = clusters.a.config
    name = topic_factory(clusters.a, partitions=2)
    producer = producer_factory(clusters.a)
    _produce(producer, name, 0, 100)
    feed = services.start_feed("lost", clusters, [name], config={"gap.policy": policy})
    assert _copied_offsets(clusters.b.config, name, 0, 100) == list(range(100))
    time.sleep(1.5)  # a transaction with the marks after the last copy
    puller = feed.pullers[0]
    assert puller.terminate() == 0
    _produce(producer, name, 0, 100)  # offsets 100-199, never copied
    group = unique("lost")
    consumer = clients.consumer(a, **{"group.id": group, "enable.partition.eof": True})
    consumer.assign([TopicPartition(name, 0, 0)])
    consume(consumer, {(name, 0): 120})
    consumer.close()
    assert committed(a, group) == {(name, 0): 120}
    admin_a = clients.admin(a)  # kept alive until the future resolves
    admin_a.delete_records([TopicPartition(name, 0, 150)])[TopicPartition(name, 0, 150)].result(30)
    _produce(producer, name, 0, 100)  # offsets 200-299
    puller.start().wait_ready()
    return feed, name, group


def _target_offset_of(config: dict[str, Any], topic: str, source_offset: int, expect: int) -> int:
    """The target offset of the copy of ``source_offset`` (partition 0)."""
    found = read_many(config, [topic], expect=expect, timeout_s=60)[topic][0]
    return next(r.offset for r in found if src_of(r.headers).offset == source_offset)


def _deleted_row(report: dict[str, Any], group: str, topic: str) -> dict[str, Any]:
    (found,) = [g for g in report["groups"] if g["group"] == group]
    (row,) = [p for p in found["partitions"] if (p["topic"], p["partition"]) == (topic, 0)]
    return row


def test_a_group_in_deleted_records_resumes_at_the_copy_of_the_log_start(
    clusters, services, topic_factory, producer_factory, unique
):
    feed, name, group = _group_in_deleted_records(
        clusters, services, "continue", topic_factory, producer_factory, unique
    )
    b = clusters.b.config
    assert _copied_offsets(b, name, 0, 250) == [*range(100), *range(150, 300)]
    at_log_start = _target_offset_of(b, name, 150, 250)
    spec = load_feed_file(feed.feed_file)
    with failover_routes(clusters, [spec]) as (url, loop):
        wait_for(
            "the group moved to the copy of the log start",
            lambda: committed(b, group).get((name, 0)) == at_log_start,
            timeout_s=60,
        )
        translator = loop.translator(spec.name)
        assert translator is not None
        (notice,) = translator.notices()
        assert f"group {group}: {name}/0: its position 120 is in offsets 120-149 (30 records)" in (
            notice
        )
        assert f"it resumes at {name}/0@{at_log_start}" in notice
        samples = {"feed": spec.name}
        deleted = "crossfeed_coordinator_translation_deleted_records"
        assert REGISTRY.get_sample_value(deleted, samples) == 30
        held = "crossfeed_coordinator_translation_held_partitions"
        assert REGISTRY.get_sample_value(held, samples) == 0

        translated = crossfeed(
            *("--config", str(feed.config_file), "groups", "translate", "--feed", feed.name),
            *("--group", group, "--feed-file", str(feed.feed_file), "--server", url, "--json"),
        )
        (row,) = [p for p in translated["partitions"] if p["partition"] == 0]
        assert (row["method"], row["exact"], row["target_offset"]) == (
            "source-deleted",
            False,
            at_log_start,
        )
        assert row["source_log_start"] == 150
        deleted_out = {k: row["deleted"][k] for k in ("first", "last", "count", "held", "key")}
        assert deleted_out == {
            "first": 120,
            "last": 149,
            "count": 30,
            "held": False,
            "key": f"{name}/0@120",
        }
        feed.stop_all()
        report = failover_cli(feed, url)
        assert _deleted_row(report, group, name)["deleted"]["count"] == 30
    # On dc-b the group reads what the target holds from the log start on, nothing twice.
    resumed = clients.consumer(b, **{"group.id": group, "enable.partition.eof": True})
    resumed.subscribe([name])
    got = read_on(resumed, {(name, 0), (name, 1)})
    resumed.close()
    assert src_offsets(got[(name, 0)]) == list(range(150, 300))

    # With dc-a lost (here: a coordinator whose dc-a address answers nothing, so the
    # broker need not be restarted), a new translator knows the log start from the feed's
    # own rows in _crossfeed.checkpoints (written by the rounds above), and reports the
    # same loss.
    lost = replace(clusters, a=replace(clusters.a, bootstrap="127.0.0.1:9"))
    with failover_routes(lost, [spec]) as (url, _loop):
        report = failover_cli(feed, url)
    assert not report["source_reachable"]
    row = _deleted_row(report, group, name)
    assert (row["method"], row["source_log_start"], row["deleted"]["count"]) == (
        "source-deleted",
        150,
        30,
    )


def test_with_gap_policy_stop_a_group_in_deleted_records_waits_for_its_acknowledgment(
    clusters, services, topic_factory, producer_factory, unique
):
    feed, name, group = _group_in_deleted_records(
        clusters, services, "stop", topic_factory, producer_factory, unique
    )
    b = clusters.b.config
    spec = load_feed_file(feed.feed_file)
    frontier = _target_offset_of(b, name, 99, 100) + 1  # the puller waits on its own gap
    with failover_routes(clusters, [spec]) as (url, _loop):
        feed.stop_all()
        report = failover_cli(feed, url)
        row = _deleted_row(report, group, name)
        assert (row["method"], row["target_offset"]) == ("source-deleted", frontier)
        assert row["deleted"]["held"] and row["deleted"]["key"] == f"{name}/0@120"
        assert "gap.policy=stop" in row["deleted"]["line"]
        assert f"crossfeed changefeed ack-gap {feed.name} {name}/0@120" in row["deleted"]["line"]
        assert (name, 0) not in committed(b, group)  # not moved
        samples = {"feed": spec.name}
        held = "crossfeed_coordinator_translation_held_partitions"
        assert REGISTRY.get_sample_value(held, samples) == 1

        # Acknowledged in the feed file (ack-gap does the same for a coordinator's feed).
        data = yaml.safe_load(feed.feed_file.read_text())
        data["config"]["gap.acknowledged"] = f"{name}/0@120"
        feed.feed_file.write_text(yaml.safe_dump(data))
        report = failover_cli(feed, url)
        row = _deleted_row(report, group, name)
        assert row["deleted"]["count"] == 30 and not row["deleted"]["held"]
        assert committed(b, group)[(name, 0)] == frontier


def test_crossfeed_status_shows_a_held_group_until_ack_gap_moves_it(
    clusters, topic_factory, producer_factory, unique, tmp_path
):
    """The same with gap.policy=stop, on a feed a coordinator runs: `crossfeed status`
    names the group's loss and the key; `crossfeed changefeed ack-gap` with the puller's
    gap and the group's position copies on and moves the group."""
    a, b = clusters.a.config, clusters.b.config
    name = topic_factory(clusters.a, partitions=2)
    producer = producer_factory(clusters.a)
    _produce(producer, name, 0, 100)
    feed = f"held-{uuid.uuid4().hex[:6]}"
    group = unique("held")
    coordinators = Coordinators(clusters, tmp_path)
    procs: list[Any] = []
    env = {"CROSSFEED_API_TOKEN": TOKEN}

    def status() -> dict[str, Any]:
        out = CliRunner().invoke(cli, ["status", "--json", "--server", url], env=env)
        assert out.exit_code == 0, out.output
        return next(f for f in json.loads(out.stdout)["feeds"] if f["name"] == feed)

    def translation_notices() -> list[str]:
        return [n for n in status()["notices"] if n.startswith("translation: ")]

    try:
        url, puller = stopped_after_100(clusters, coordinators, name, feed, tmp_path, procs)
        _produce(producer, name, 0, 100)
        consumer = clients.consumer(a, **{"group.id": group, "enable.partition.eof": True})
        consumer.assign([TopicPartition(name, 0, 0)])
        consume(consumer, {(name, 0): 120})
        consumer.close()
        admin_a = clients.admin(a)  # kept alive until the future resolves
        deleted = TopicPartition(name, 0, 150)
        admin_a.delete_records([deleted])[deleted].result(30)
        _produce(producer, name, 0, 100)
        puller.start()

        (line,) = wait_for("the group in crossfeed status", translation_notices, 60)
        assert f"group {group}: {name}/0: its position 120 is in offsets 120-149 (30 records)" in (
            line
        )
        assert "not moved (gap.policy=stop) until acknowledged: 'crossfeed changefeed ack-gap " in (
            line
        )
        assert f"{feed} {name}/0@120'" in line
        assert status()["state"] == "normal"
        # Where the commit stream put it while offsets 100-149 still existed: the end of
        # the copies. Held there, not moved past the loss.
        frontier = _target_offset_of(b, name, 99, 100) + 1
        assert committed(b, group) == {(name, 0): frontier}

        def ack(*keys: str) -> None:
            done = CliRunner().invoke(
                cli, ["changefeed", "ack-gap", feed, *keys, "--server", url], env=env
            )
            assert done.exit_code == 0, done.output

        ack(f"{name}/0@100")  # the puller's gap: the partition is copied on
        assert _copied_offsets(b, name, 0, 250) == [*range(100), *range(150, 300)]
        at_log_start = _target_offset_of(b, name, 150, 250)
        # Translated again with the copies after the gap: still held where it was.
        (still,) = wait_for(
            "the copy of the log start in the group's line",
            lambda: [
                n
                for n in translation_notices()
                if f"then it resumes at {name}/0@{at_log_start}" in n
            ],
            30,
        )
        assert "not moved (gap.policy=stop)" in still
        assert committed(b, group) == {(name, 0): frontier}

        ack(f"{name}/0@120")  # the group's position: it moves
        wait_for(
            "the group moved to the copy of the log start",
            lambda: committed(b, group).get((name, 0)) == at_log_start,
            timeout_s=60,
        )
        wait_for("the acknowledged notices gone", lambda: not status()["notices"], 30)
    finally:
        for proc in procs:
            proc.kill()
        coordinators.stop()
