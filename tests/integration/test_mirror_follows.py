"""A mirror that follows its source as it changes, against real brokers: partitions added
at the source while records flow, topic configs changed at the source, records deleted at
the source before a puller copied them (docs/operating.md, "What follows the source")."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import yaml
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)
from typer.testing import CliRunner

from crossfeed import dlq
from crossfeed.cli.main import app as cli
from crossfeed.client.rest import CoordinatorClient
from crossfeed.core.provenance import src_of
from crossfeed.feeds import load_feed_file
from crossfeed.kafka import clients
from crossfeed.kafka.topics import overridden_configs
from crossfeed.wire import topics
from tests.integration.test_coordinator_mirror import start_coordinated
from tests.integration.test_coordinator_process import TOKEN, Coordinators
from tests.integration.test_failover import (
    committed,
    consume,
    failover_cli,
    failover_routes,
    read_on,
    src_offsets,
    wait_for,
)
from tests.support.verify import by_partition, flatten, read_many, verify_mirror
from tests.support.workload import ContinuousProducer

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

REFRESH_S = 2.0
FAST = {
    "puller": {"topic_refresh_s": REFRESH_S},
    "coordinator": {"translate_interval_s": 0.5},
}


def test_partitions_added_at_the_source_are_copied_exactly_once_and_groups_fail_over_onto_them(
    clusters, services, topic_factory, unique
):
    a, b = clusters.a.config, clusters.b.config
    name = topic_factory(clusters.a, partitions=2)
    feed = services.start_feed("grow", clusters, [name], pullers=2, settings=FAST)
    live = ContinuousProducer(
        a, [name], 400, producer_config={"topic.metadata.refresh.interval.ms": 500}
    ).start()
    try:
        time.sleep(3)
        admin_a = clients.admin(a)  # kept alive until the future resolves
        admin_a.create_partitions([NewPartitions(name, 4)])[name].result(30)
        grown_at = time.monotonic()
        admin_b = clients.admin(b)
        wait_for(
            "the target topic to gain the partitions",
            lambda: len(admin_b.list_topics(name, timeout=5).topics[name].partitions) == 4,
            timeout_s=REFRESH_S + 10,
        )
        assert time.monotonic() - grown_at < REFRESH_S + 10
        # The producer writes into the new partitions once its metadata has them.
        wait_for(
            "records in the new partitions",
            lambda: {r.partition for r in live.acked if r.partition >= 2} == {2, 3},
            timeout_s=30,
        )
        time.sleep(3)
    finally:
        produced = live.stop()
    source = read_many(a, [name])
    target = read_many(b, [name], expect=len(produced), timeout_s=120)
    assert len(flatten(source)) == len(produced)
    verify_mirror(
        source,
        target,
        source_cluster_id=clusters.a.cluster_id,
        target_cluster_id=clusters.b.cluster_id,
    ).assert_ok(feed.logs())
    assert {p for (_, p) in by_partition(target)} == {0, 1, 2, 3}
    logs = "".join(p.log_text() for p in feed.pullers)
    assert "gained partitions 2-3 at the source" in logs
    assert "grown from 2 to 4 partitions" in logs

    # A group reads part of every partition on dc-a, the new ones too, and commits.
    group = unique("grown")
    consumer = clients.consumer(a, **{"group.id": group, "enable.partition.eof": True})
    consumer.subscribe([name])
    parts = [(name, p) for p in range(4)]
    consume(consumer, {tp: 20 + 5 * tp[1] for tp in parts})
    consumer.close()
    on_a = committed(a, group)
    assert set(on_a) == set(parts)

    spec = load_feed_file(feed.feed_file)
    with failover_routes(clusters, [spec]) as (url, _loop):
        wait_for(
            "the group translated onto dc-b",
            lambda: set(committed(b, group)) == set(parts),
            timeout_s=60,
        )
        feed.stop_all()
        report = failover_cli(feed, url)
        assert report["source_reachable"]
        assert all(r["unreplicated"] == 0 for r in report["partitions"]), report["partitions"]
    source_by = by_partition(source)
    resumed = clients.consumer(b, **{"group.id": group, "enable.partition.eof": True})
    resumed.subscribe([name])
    got = read_on(resumed, set(parts))
    resumed.close()
    for tp in parts:
        expected = [r.offset for r in source_by[tp] if r.offset >= on_a[tp]]
        assert src_offsets(got[tp]) == expected, tp
        assert expected, tp


# -- gaps: records deleted at the source before they were copied ---------------------------


def _produce(producer, topic: str, partition: int, count: int) -> None:
    for n in range(count):
        producer.produce(topic, key=b"k%d" % n, value=b"v%d" % n, partition=partition)
    producer.flush(10)


def _copied_offsets(config, topic: str, partition: int, expect: int) -> list[int]:
    """The source offsets the copies in ``topic``/``partition`` of the target name, in order."""
    found = read_many(config, [topic], expect=expect, timeout_s=60)[topic]
    return [src_of(r.headers).offset for r in found.get(partition, [])]


def _gap_letters(config, feed_name: str) -> list[dict[str, str]]:
    letters = read_many(config, [topics.DLQ])[topics.DLQ]
    return [
        {k: (v or b"").decode() for k, v in r.headers}
        for r in flatten({topics.DLQ: letters})
        if r.header(dlq.FEED) == feed_name.encode()
    ]


def _lose_records(clusters, services, policy: str, topic_factory, producer_factory):
    """A feed copies offsets 0-99 of partition 0, every puller stops, 100 more are written
    and the first 50 of those deleted (DeleteRecords), 100 more written; then the puller
    starts again. Returns the feed, the topic and the producer."""
    name = topic_factory(clusters.a, partitions=2)
    producer = producer_factory(clusters.a)
    _produce(producer, name, 0, 100)
    feed = services.start_feed("gap", clusters, [name], config={"gap.policy": policy})
    assert _copied_offsets(clusters.b.config, name, 0, 100) == list(range(100))
    time.sleep(1.5)  # a transaction with the marks after the last copy
    puller = feed.pullers[0]
    assert puller.terminate() == 0
    _produce(producer, name, 0, 100)
    admin_a = clients.admin(clusters.a.config)  # kept alive until the future resolves
    admin_a.delete_records([TopicPartition(name, 0, 150)])[TopicPartition(name, 0, 150)].result(30)
    _produce(producer, name, 0, 100)  # offsets 200-299
    puller.start().wait_ready()
    return feed, name, producer


def _gap_reported(feed, name: str, waiting: bool) -> dict:
    puller = feed.pullers[0]
    status = puller.wait_status(lambda s: bool(s.get("gaps")), 30, "the gap reported")
    assert status["gaps"] == [
        {
            "partition": f"{name}/0",
            "first": 100,
            "last": 149,
            "count": 50,
            "key": f"{name}/0@100",
            "waiting": waiting,
        }
    ]
    # Not an error (a feed in error too long is stopped whole): a notice until acknowledged.
    assert status["state"] == "normal" and status["last_error"] is None
    (notice,) = status["notices"]
    assert f"{name}/0: offsets 100-149 (50 records) were deleted at the source" in notice
    assert f"crossfeed changefeed ack-gap {feed.name} {name}/0@100" in notice
    labels = {"feed": feed.name, "topic": name, "partition": "0"}
    assert puller.metric("crossfeed_puller_gap_records_total", labels) == 50
    assert "offsets 100-149 (50 records) were deleted at the source" in puller.log_text()
    return status


def test_a_gap_is_reported_with_its_range_and_count_copying_goes_on_and_restarts_keep_it(
    clusters, services, topic_factory, producer_factory
):
    feed, name, producer = _lose_records(
        clusters, services, "continue", topic_factory, producer_factory
    )
    _gap_reported(feed, name, waiting=False)
    # Copying went on from the log start: every surviving record once, in order.
    copied = _copied_offsets(clusters.b.config, name, 0, 250)
    assert copied == [*range(100), *range(150, 300)]
    letters = _gap_letters(clusters.b.config, feed.name)
    assert len(letters) == 1, letters
    assert letters[0][dlq.ERROR_CLASS] == "SourceRecordsDeleted"
    assert letters[0][dlq.TOPIC] == name and letters[0][dlq.PARTITION] == "0"
    assert letters[0][dlq.OFFSET] == "100" and letters[0][dlq.GAP_END] == "150"

    # A restart forgets nothing: the partition's marks carry the gap until acknowledged.
    puller = feed.pullers[0]
    time.sleep(1.5)  # a transaction with the marks after the last copy
    assert puller.terminate() == 0
    puller.start().wait_ready()
    status = puller.wait_status(lambda s: bool(s.get("gaps")), 30, "the gap reported again")
    assert [(g["key"], g["count"], g["waiting"]) for g in status["gaps"]] == [
        (f"{name}/0@100", 50, False)
    ]
    (notice,) = status["notices"]
    assert f"{name}/0: offsets 100-149 (50 records) were deleted at the source" in notice
    assert f"crossfeed changefeed ack-gap {feed.name} {name}/0@100" in notice
    unacknowledged = "crossfeed_puller_gaps_unacknowledged"
    assert puller.metric(unacknowledged, {"feed": feed.name}) == 1
    assert "(reported before, not acknowledged yet)" in puller.log_text()
    _produce(producer, name, 0, 10)  # offsets 300-309: copying goes on, nothing twice
    copied = _copied_offsets(clusters.b.config, name, 0, 260)
    assert copied == [*range(100), *range(150, 310)]
    assert len(_gap_letters(clusters.b.config, feed.name)) == 1

    # Acknowledged (a feed file: its option, and the puller started again): gone for good.
    spec = yaml.safe_load(feed.feed_file.read_text())
    spec["config"]["gap.acknowledged"] = f"{name}/0@100"
    feed.feed_file.write_text(yaml.safe_dump(spec))
    for _ in range(2):  # the second start reads marks written after the acknowledgment
        time.sleep(1.5)
        assert puller.terminate() == 0
        puller.start().wait_ready()
        status = puller.wait_status(
            lambda s: f"{name}/0" in s["partitions"], 30, "the partition's task started"
        )
        assert status["state"] == "normal"
        assert status["gaps"] == [] and status["notices"] == []
        assert puller.metric(unacknowledged, {"feed": feed.name}) == 0


def test_with_gap_policy_stop_the_partition_waits_until_the_gap_is_acknowledged(
    clusters, services, topic_factory, producer_factory
):
    feed, name, producer = _lose_records(
        clusters, services, "stop", topic_factory, producer_factory
    )
    _gap_reported(feed, name, waiting=True)
    _produce(producer, name, 1, 10)  # the other partition is copied meanwhile
    assert _copied_offsets(clusters.b.config, name, 1, 110) == list(range(10))
    time.sleep(2)
    assert _copied_offsets(clusters.b.config, name, 0, 100) == list(range(100))
    assert not _gap_letters(clusters.b.config, feed.name)

    # Acknowledged (a feed file: its option, and the pullers started again).
    spec = yaml.safe_load(feed.feed_file.read_text())
    spec["config"]["gap.acknowledged"] = f"{name}/0@100"
    feed.feed_file.write_text(yaml.safe_dump(spec))
    puller = feed.pullers[0]
    assert puller.terminate() == 0  # it lets go of a task with a waiting partition cleanly
    puller.start().wait_ready()
    copied = _copied_offsets(clusters.b.config, name, 0, 260)
    assert copied == [*range(100), *range(150, 300)]
    status = puller.wait_state("normal", 30)
    assert status["gaps"] == [] and status["notices"] == []
    letters = _gap_letters(clusters.b.config, feed.name)
    assert [(x[dlq.OFFSET], x[dlq.GAP_END]) for x in letters] == [("100", "150")]


# -- topic configs, deleted topics ----------------------------------------------------------


def _alter(admin, topic: str, **configs: str | None) -> None:
    """Set (a value) or remove (None) topic-level configs, like an operator would."""
    entries = [
        ConfigEntry(
            k.replace("_", "."),
            v,
            incremental_operation=AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET,
        )
        for k, v in configs.items()
    ]
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(30)


def test_topic_configs_follow_the_source_except_excluded_and_deleted_topics_are_kept(
    clusters, services, topic_factory, producer_factory
):
    name = topic_factory(clusters.a, partitions=1, config={"retention.ms": "86400000"})
    gone = topic_factory(clusters.a, partitions=1)
    producer = producer_factory(clusters.a)
    _produce(producer, gone, 0, 3)
    sync_s = 2.0
    feed = services.start_feed(
        "configs", clusters, [name, gone], settings={"puller": {"config_sync_interval_s": sync_s}}
    )
    admin_a, admin_b = clients.admin(clusters.a.config), clients.admin(clusters.b.config)
    wait_for("the target topic", lambda: name in admin_b.list_topics(timeout=5).topics, 30)
    assert overridden_configs(admin_b, name) == {"retention.ms": "86400000"}

    # At the source: one synced config changed, one added; an excluded one set.
    _alter(admin_a, name, retention_ms="3600000", cleanup_policy="compact")
    _alter(admin_a, name, min_insync_replicas="1", message_timestamp_type="LogAppendTime")
    # On the target by hand: a synced config (overwritten) and an excluded one (kept).
    _alter(admin_b, name, segment_ms="600000", unclean_leader_election_enable="true")
    changed_at = time.monotonic()
    wanted = {
        "retention.ms": "3600000",
        "cleanup.policy": "compact",
        "unclean.leader.election.enable": "true",
    }
    wait_for(
        "the target topic's configs following the source",
        lambda: overridden_configs(admin_b, name) == wanted,
        timeout_s=sync_s + 10,
    )
    assert time.monotonic() - changed_at < sync_s + 10

    # A source override removed: removed on the target too.
    _alter(admin_a, name, cleanup_policy=None)
    wanted.pop("cleanup.policy")
    wait_for("the removed override", lambda: overridden_configs(admin_b, name) == wanted, 15)

    # A source topic deleted: its target (and what it holds) is kept, and the status says so.
    read_many(clusters.b.config, [gone], expect=3, timeout_s=30)
    admin_a.delete_topics([gone])[gone].result(30)
    puller = feed.pullers[0]
    status = puller.wait_status(
        lambda s: any(gone in n and "deleted" in n for n in s["notices"]), 30, "the deletion"
    )
    assert f"source topic {gone} was deleted; its target topic {gone} is kept" in (
        " ".join(status["notices"])
    )
    assert status["state"] == "normal"
    assert len(flatten(read_many(clusters.b.config, [gone]))) == 3


def stopped_after_100(
    clusters, coordinators: Coordinators, name: str, feed: str, tmp_path, procs: list
) -> tuple[str, Any]:
    """A coordinator (``coordinators``) running feed ``feed`` with gap.policy=stop over
    topic ``name``, and its puller, stopped once offsets 0-99 of partition 0 are copied.
    Returns the coordinator's URL and the puller."""
    coordinators.start(1)
    url = coordinators.settle(60).url
    with CoordinatorClient(url, TOKEN) as api:
        api.create_feed(
            {
                "name": feed,
                "source": "dc-a",
                "sink-uri": "kafka://dc-b",
                "topics": [name],
                "config": {"staging.partitions": "2", "gap.policy": "stop"},
            }
        )
    puller = start_coordinated("puller", feed, 0, coordinators.config_file, tmp_path, procs)
    assert _copied_offsets(clusters.b.config, name, 0, 100) == list(range(100))
    time.sleep(1.5)  # a transaction with the marks after the last copy
    puller.terminate()
    return url, puller


def test_a_gap_in_crossfeed_status_and_ack_gap_through_the_coordinator(
    clusters, topic_factory, producer_factory, tmp_path
):
    name = topic_factory(clusters.a, partitions=2)
    producer = producer_factory(clusters.a)
    _produce(producer, name, 0, 100)
    feed = f"ack-{uuid.uuid4().hex[:6]}"
    coordinators = Coordinators(clusters, tmp_path)
    procs: list = []
    env = {"CROSSFEED_API_TOKEN": TOKEN}
    try:
        url, puller = stopped_after_100(clusters, coordinators, name, feed, tmp_path, procs)
        _produce(producer, name, 0, 100)
        admin_a = clients.admin(clusters.a.config)
        admin_a.delete_records([TopicPartition(name, 0, 150)])[TopicPartition(name, 0, 150)].result(
            30
        )
        _produce(producer, name, 0, 100)
        puller.start()

        def status() -> dict:
            out = CliRunner().invoke(cli, ["status", "--json", "--server", url], env=env)
            assert out.exit_code == 0, out.output
            return next(f for f in json.loads(out.stdout)["feeds"] if f["name"] == feed)

        shown = wait_for("the gap in crossfeed status", lambda: status()["notices"], 30)
        (notice,) = shown
        assert f"{name}/0: offsets 100-149 (50 records) were deleted at the source" in notice
        assert "waits (gap.policy=stop)" in notice
        assert f"crossfeed changefeed ack-gap {feed} {name}/0@100" in notice
        assert status()["state"] == "normal"
        time.sleep(2)
        assert _copied_offsets(clusters.b.config, name, 0, 100) == list(range(100))

        acked = CliRunner().invoke(
            cli, ["changefeed", "ack-gap", feed, f"{name}/0@100", "--server", url], env=env
        )
        assert acked.exit_code == 0, acked.output
        copied = _copied_offsets(clusters.b.config, name, 0, 250)
        assert copied == [*range(100), *range(150, 300)]
        wait_for("the acknowledged gap gone from status", lambda: not status()["notices"], 30)
        letters = _gap_letters(clusters.b.config, feed)
        assert [(x[dlq.OFFSET], x[dlq.GAP_END]) for x in letters] == [("100", "150")]
    finally:
        for proc in procs:
            proc.kill()
        coordinators.stop()


def test_a_position_past_the_sources_end_stops_that_partition_with_an_error(
    clusters, services, topic_factory, producer_factory
):
    """The source loses records it had served (here: the topic deleted and created again
    while the puller was stopped): the partition is not copied again from offset 0 —
    nothing twice — and the feed says why; the other partition goes on."""
    name = topic_factory(clusters.a, partitions=2)
    producer = producer_factory(clusters.a)
    _produce(producer, name, 0, 100)
    feed = services.start_feed("beyond", clusters, [name])
    assert _copied_offsets(clusters.b.config, name, 0, 100) == list(range(100))
    time.sleep(1.5)  # a transaction with the marks after the last copy
    puller = feed.pullers[0]
    assert puller.terminate() == 0
    admin_a = clients.admin(clusters.a.config)  # kept alive until the futures resolve
    admin_a.delete_topics([name])[name].result(30)
    wait_for("the topic gone", lambda: name not in admin_a.list_topics(timeout=5).topics, 30)
    topic_factory(clusters.a, partitions=2, name=name)
    _produce(producer, name, 0, 10)  # offsets 0-9: below the copied position 100
    _produce(producer, name, 1, 20)
    puller.start().wait_ready()

    status = puller.wait_state("error", 30)
    assert (
        f"{name}/0: the next offset to copy, 100, is past the source's log end 10"
        in status["last_error"]
    )
    assert "not copied until its task restarts" in status["last_error"]
    assert "past the source's log end 10" in puller.log_text()
    # The other partition is copied meanwhile; partition 0 gets nothing, not even again.
    assert _copied_offsets(clusters.b.config, name, 1, 120) == list(range(20))
    time.sleep(2)
    assert _copied_offsets(clusters.b.config, name, 0, 120) == list(range(100))
    assert puller.wait_state("error", 5)["last_error"] == status["last_error"]
