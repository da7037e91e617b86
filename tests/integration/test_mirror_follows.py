"""A mirror that follows its source as it changes, against real brokers: partitions added
at the source while records flow, topic configs changed at the source, records deleted at
the source before a puller copied them (docs/operating.md, "What follows the source")."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import NewPartitions

from crossfeed.feeds import load_feed_file
from crossfeed.kafka import clients
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
