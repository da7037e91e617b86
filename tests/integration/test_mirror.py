"""Mirror changefeeds against real brokers: exactly once, in order, byte for byte, no loops.

Each test starts pullers as real processes (``crossfeed puller run`` with a feed file):
a mirror feed's pullers write the target topics directly, with their positions and
OffsetSyncs in the same transactions; the tests check what lands on the target cluster.
"""

from __future__ import annotations

import random
import time

import pytest
from confluent_kafka.admin import NewTopic

from crossfeed.core.offset_ranges import OffsetRun, OffsetSyncIndex
from crossfeed.core.partitions import TopicPartition
from crossfeed.dlq import ERROR_CLASS, FEED, OFFSET, PARTITION, STAGE, TOPIC
from crossfeed.kafka import clients
from crossfeed.kafka.topics import (
    NewTopicSpec,
    ensure_topic,
    ensure_topics,
    overridden_configs,
)
from crossfeed.wire import codec, headers, topics
from tests.support.services import EXIT_FEED_STOPPED
from tests.support.verify import flatten, read_many, verify_active_active, verify_mirror
from tests.support.workload import ContinuousProducer, produce_mixed

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

# Short group sessions keep takeover tests quick (the broker's minimum is 6 s).
FAST_FAILOVER = {"coordinator": {"failover_timeout_s": 6}}


def _source_and_target(clusters, source_topics, target_expect, timeout_s=180):
    source = read_many(clusters.a.config, source_topics)
    target = read_many(clusters.b.config, source_topics, expect=target_expect, timeout_s=timeout_s)
    return source, target


def _offset_syncs(config, feed):
    """The feed's OffsetSync ranges by source partition, as an index each."""
    records = read_many(config, [topics.OFFSET_SYNCS])[topics.OFFSET_SYNCS]
    index: dict[TopicPartition, OffsetSyncIndex] = {}
    for record in flatten({topics.OFFSET_SYNCS: records}):
        sync = codec.decode("OffsetSync", record.value)
        if sync["feed"] != feed:
            continue
        tp = TopicPartition(sync["topic"], sync["partition"])
        index.setdefault(tp, OffsetSyncIndex()).add(
            OffsetRun(sync["source_start"], sync["source_end"], sync["target_start"])
        )
    return index


def test_200k_records_exactly_once_in_order_with_provenance(clusters, services, topic_factory):
    names = [topic_factory(clusters.a, partitions=6) for _ in range(3)]
    produced = produce_mixed(clusters.a.config, names, 6, 200_000, seed=7)
    feed = services.start_feed("exact", clusters, names, pullers=2)

    source, target = _source_and_target(clusters, names, len(produced))
    verify_mirror(
        source,
        target,
        source_cluster_id=clusters.a.cluster_id,
        target_cluster_id=clusters.b.cluster_id,
    ).assert_ok(feed.logs())
    assert len(flatten(source)) == 200_000  # the aborted records were never committed

    # Target topics were created like their sources.
    meta = clients.admin(clusters.b.config).list_topics(timeout=10).topics
    assert all(len(meta[name].partitions) == 6 for name in names)

    # OffsetSync ranges translate source offsets exactly onto the copies.
    index = _offset_syncs(clusters.b.config, feed.name)
    copies = {(r.header(headers.PROV)): r for r in flatten(target)}
    rng = random.Random(3)
    sample = rng.sample(flatten(source), 300)
    for record in sample:
        tp = TopicPartition(record.topic, record.partition)
        translation = index[tp].translate(record.offset)
        assert translation is not None and translation.exact, (tp, record.offset)
        src = f"{clusters.a.cluster_id}/{record.topic}/{record.partition}/{record.offset}".encode()
        assert copies[src].offset == translation.target_offset, (tp, record.offset)


def test_kill_9_pullers_repeatedly_still_exactly_once(clusters, services, topic_factory):
    names = [topic_factory(clusters.a, partitions=4) for _ in range(2)]
    backlog = produce_mixed(clusters.a.config, names, 4, 40_000, seed=11)
    feed = services.start_feed("kill9", clusters, names, pullers=2, settings=FAST_FAILOVER)
    rng = random.Random(5)
    with ContinuousProducer(clusters.a.config, names, 1500) as live:
        for round_ in range(6):
            time.sleep(rng.uniform(0.5, 3.0))
            victim = feed.pullers[round_ % 2]
            victim.kill()
            victim.restart()
            time.sleep(rng.uniform(0.2, 1.5))
            other = feed.pullers[(round_ + 1) % 2]
            other.kill()
            other.restart()
        time.sleep(2)
    produced = len(backlog) + len(live.acked)
    for proc in feed.processes:
        assert len(proc.exit_codes) >= 6, proc.describe()  # killed and restarted each round

    source, target = _source_and_target(clusters, names, produced, timeout_s=240)
    assert len(flatten(source)) == produced
    verify_mirror(
        source,
        target,
        source_cluster_id=clusters.a.cluster_id,
        target_cluster_id=clusters.b.cluster_id,
    ).assert_ok(feed.logs())


def test_active_active_same_topic_names_no_loop(clusters, services, unique):
    name = unique("aa")
    for cluster in (clusters.a, clusters.b):  # the same name and partitions on both sides
        admin = clients.admin(cluster.config)  # kept alive until the future resolves
        admin.create_topics([NewTopic(name, 4, 1)])[name].result(30)
    ab = services.start_feed("ab", clusters, [name], source="dc-a", target="dc-b")
    ba = services.start_feed("ba", clusters, [name], source="dc-b", target="dc-a")
    with (
        ContinuousProducer(clusters.a.config, [name], 400, name="on-a") as on_a,
        ContinuousProducer(clusters.b.config, [name], 400, name="on-b") as on_b,
    ):
        time.sleep(12)
    expect_each = len(on_a.acked) + len(on_b.acked)
    a_records = read_many(clusters.a.config, [name], expect=expect_each, timeout_s=120)
    b_records = read_many(clusters.b.config, [name], expect=expect_each, timeout_s=120)
    time.sleep(3)  # a looping copy would arrive after the expected ones
    a_records = read_many(clusters.a.config, [name])
    b_records = read_many(clusters.b.config, [name])
    verify_active_active(
        on_a.acked, on_b.acked, a_records, b_records, clusters.a.cluster_id, clusters.b.cluster_id
    ).assert_ok(ab.logs() + ba.logs())
    # Each puller saw the other direction's copies and dropped them, counted.
    dropped = sum(
        feed.pullers[0].metric("crossfeed_puller_loop_dropped_records_total") or 0
        for feed in (ab, ba)
    )
    assert dropped >= expect_each - 10  # every copy came back to a puller and was dropped

    # The puller's copies on dc-b were interleaved with on_b's records in the same
    # partitions, yet the OffsetSync ranges still map every dc-a record exactly (the task
    # redoes such a transaction with a delivery report per record).
    index = _offset_syncs(clusters.b.config, ab.name)
    copies = {r.header(headers.PROV): r for r in flatten(b_records) if r.header(headers.PROV)}
    own = [r for r in flatten(a_records) if r.header(headers.PROV) is None]
    for record in random.Random(9).sample(own, min(300, len(own))):
        tp = TopicPartition(record.topic, record.partition)
        translation = index[tp].translate(record.offset)
        assert translation is not None and translation.exact, (tp, record.offset)
        src = f"{clusters.a.cluster_id}/{record.topic}/{record.partition}/{record.offset}".encode()
        assert copies[src].offset == translation.target_offset, (tp, record.offset)


def test_paused_instances_are_fenced_after_takeover(clusters, services, topic_factory):
    names = [topic_factory(clusters.a, partitions=4)]
    first = produce_mixed(clusters.a.config, names, 4, 5_000, seed=1, abort_every=None)
    feed = services.start_feed("zombie", clusters, names, pullers=2, settings=FAST_FAILOVER)
    read_many(clusters.b.config, names, expect=len(first), timeout_s=60)
    zombie_puller = feed.pullers[0]
    zombie_puller.pause()
    second = produce_mixed(clusters.a.config, names, 4, 5_000, seed=2, abort_every=None)
    staging = 8  # the default staging.partitions: one puller task each
    feed.pullers[1].wait_status(
        lambda s: len(s.get("tasks", [])) == staging, 60, "the live puller owns every task"
    )
    read_many(clusters.b.config, names, expect=len(first) + len(second), timeout_s=90)
    zombie_puller.resume()
    third = produce_mixed(clusters.a.config, names, 4, 5_000, seed=3, abort_every=None)
    time.sleep(8)  # room for the zombies to try whatever they had in flight
    total = len(first) + len(second) + len(third)
    source, target = _source_and_target(clusters, names, total)
    verify_mirror(
        source,
        target,
        source_cluster_id=clusters.a.cluster_id,
        target_cluster_id=clusters.b.cluster_id,
    ).assert_ok(feed.logs())
    assert "fenced" in zombie_puller.log_text() or zombie_puller.status()["tasks"] == [], (
        zombie_puller.describe()
    )


def _dead_letters(config, feed_name):
    records = read_many(config, [topics.DLQ])[topics.DLQ]
    return [r for r in flatten({topics.DLQ: records}) if r.header(FEED) == feed_name.encode()]


def test_oversized_and_filtered_records_go_to_the_dlq_and_the_feed_goes_on(
    clusters, services, topic_factory, producer_factory
):
    name = topic_factory(clusters.a, partitions=2)
    topic_factory(clusters.b, partitions=2, name=name, config={"max.message.bytes": "4000"})
    producer = producer_factory(clusters.a)
    producer.produce(name, key=b"ok-1", value=b"small", partition=0)
    producer.produce(name, key=b"big", value=b"x" * 10_000, partition=0)
    producer.produce(name, key=b"ok-2", value=b"small", partition=1)
    producer.produce(name, key=b"bad", value=b"v", partition=1, headers=[("reject-me", b"1")])
    producer.produce(name, key=b"ok-3", value=b"small", partition=1)
    producer.flush(10)
    # the target's own max.message.bytes makes the big record too large there: no config
    # sync, which would set the target's configs to the source's
    feed = services.start_feed(
        "dlq",
        clusters,
        [name],
        config={"filter.reject.header": "reject-me"},
        settings={"puller": {"config_sync_interval_s": 0}},
    )
    target = read_many(clusters.b.config, [name], expect=3, timeout_s=60)
    assert sorted(r.key for r in flatten(target)) == [b"ok-1", b"ok-2", b"ok-3"]

    deadline = time.monotonic() + 30
    letters = []
    while time.monotonic() < deadline and len(letters) < 2:
        letters = _dead_letters(clusters.b.config, feed.name)
        time.sleep(0.5)
    by_key = {r.key: r for r in letters}
    assert set(by_key) == {b"big", b"bad"}, feed.logs()
    big, bad = by_key[b"big"], by_key[b"bad"]
    assert big.value == b"x" * 10_000
    assert big.header(ERROR_CLASS) == b"RecordTooLarge"
    assert big.header(STAGE) == b"puller"
    assert (big.header(TOPIC), big.header(PARTITION), big.header(OFFSET)) == (
        name.encode(),
        b"0",
        b"1",
    )
    assert bad.header(ERROR_CLASS) == b"RejectedByFilter"
    assert bad.header(STAGE) == b"puller"
    assert (bad.header(PARTITION), bad.header(OFFSET)) == (b"1", b"1")
    assert bad.header("reject-me") == b"1"  # the record's own headers are kept

    # The feed goes on.
    producer.produce(name, key=b"ok-4", value=b"small", partition=0)
    producer.flush(10)
    target = read_many(clusters.b.config, [name], expect=4, timeout_s=60)
    assert b"ok-4" in {r.key for r in flatten(target)}
    assert feed.pullers[0].metric("crossfeed_puller_dlq_records_total") == 2


def test_errors_tolerance_none_stops_the_feed_with_a_clear_error(
    clusters, services, topic_factory, producer_factory
):
    name = topic_factory(clusters.a, partitions=1)
    producer = producer_factory(clusters.a)
    producer.produce(name, key=b"ok", value=b"v")
    producer.produce(name, key=b"bad", value=b"v", headers=[("reject-me", b"1")])
    producer.flush(10)
    feed = services.start_feed(
        "strict",
        clusters,
        [name],
        config={"filter.reject.header": "reject-me", "errors.tolerance": "none"},
        wait=False,
    )
    puller = feed.pullers[0]
    assert puller.wait_exit(60) == EXIT_FEED_STOPPED, puller.describe()
    log = puller.log_text()
    assert "errors.tolerance=none" in log and "RejectedByFilter" in log
    assert f"{name}/0/1" in log  # names the record that stopped it
    assert not _dead_letters(clusters.b.config, feed.name)  # stopped, not dead-lettered


def test_a_target_with_fewer_partitions_is_grown_and_one_with_more_stays(
    clusters, services, topic_factory, producer_factory
):
    fewer = topic_factory(clusters.a, partitions=4)
    topic_factory(clusters.b, partitions=2, name=fewer)
    more = topic_factory(clusters.a, partitions=2)
    topic_factory(clusters.b, partitions=3, name=more)
    producer = producer_factory(clusters.a)
    for p in range(4):
        producer.produce(fewer, value=b"v", partition=p)
    for p in range(2):
        producer.produce(more, value=b"v", partition=p)
    producer.flush(10)
    feed = services.start_feed("fewer", clusters, [fewer, more], wait=True)
    admin = clients.admin(clusters.b.config)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(fewer, timeout=5).topics[fewer].partitions) < 4:
        assert time.monotonic() < deadline, feed.pullers[0].log_tail()
        time.sleep(0.2)
    # (read_many takes a topic's partitions as it first finds them)
    target = read_many(clusters.b.config, [fewer, more], expect=6, timeout_s=60)
    assert {(r.topic, r.partition) for r in flatten(target)} == {
        *((fewer, p) for p in range(4)),
        *((more, p) for p in range(2)),
    }
    meta = admin.list_topics(timeout=10).topics
    assert len(meta[more].partitions) == 3  # never shrunk, never touched
    assert "grown from 2 to 4 partitions" in feed.pullers[0].log_text()
    feed.pullers[0].wait_state("normal", 30)


def test_new_matching_topics_are_picked_up_with_their_configs(
    clusters, services, unique, topic_factory, producer_factory
):
    prefix = unique("dyn")
    first = topic_factory(clusters.a, partitions=1, name=f"{prefix}-first")
    feed = services.start_feed("dyn", clusters, [f"{prefix}-.*"], exclude=[f"{prefix}-skip.*"])
    feed.wait_state("normal")
    config = {
        "cleanup.policy": "compact",
        "retention.ms": "12345678",
        "max.message.bytes": "200000",
    }
    created_at = time.monotonic()
    late = topic_factory(clusters.a, partitions=3, name=f"{prefix}-late", config=config)
    skipped = topic_factory(clusters.a, partitions=1, name=f"{prefix}-skipped")
    producer = producer_factory(clusters.a)
    for p in range(3):
        producer.produce(late, key=b"k", value=b"v", partition=p)
    producer.produce(first, key=b"k", value=b"v")
    producer.produce(skipped, key=b"k", value=b"v")
    producer.flush(10)

    admin_b = clients.admin(clusters.b.config)
    while late not in admin_b.list_topics(timeout=5).topics:
        assert time.monotonic() - created_at < 10, feed.logs()
        time.sleep(0.2)
    target = read_many(clusters.b.config, [late], expect=3, timeout_s=30)
    assert len(flatten(target)) == 3
    assert len(admin_b.list_topics(timeout=5).topics[late].partitions) == 3
    assert overridden_configs(admin_b, late) == config
    assert skipped not in admin_b.list_topics(timeout=5).topics


def test_many_new_topics_at_once_and_refused_targets_stop_only_their_own(
    clusters, services, unique, producer_factory
):
    """Target topics are created in one request however many are new. A source topic
    whose target the rename format cannot name, and one whose target the target cluster
    refuses, put the feed in the error state naming them; every other topic is copied
    all the same (before, one refused creation held back every new topic, and an
    illegal renamed name stopped the puller)."""
    prefix = unique("many")
    compacted = {"cleanup.policy": "compact", "retention.ms": "7654321"}
    specs = [
        NewTopicSpec(f"{prefix}-{i:03d}", 1 + i % 3, compacted if i % 20 == 0 else {})
        for i in range(60)
    ]
    # Renamed (".x" added) it is longer than the 249 characters Kafka allows.
    too_long = f"{prefix}-" + "z" * (248 - len(prefix))
    # Its target "<prefix>-collide.x" collides with dc-b's "<prefix>-collide_x" ('.' and
    # '_' share metric names): the target cluster refuses to create it.
    collides = f"{prefix}-collide"
    ensure_topic(clients.admin(clusters.b.config), f"{collides}_x", 1)
    refused = [NewTopicSpec(too_long, 1, {}), NewTopicSpec(collides, 1, {})]
    assert set(ensure_topics(clients.admin(clusters.a.config), specs + refused).values()) == {True}
    producer = producer_factory(clusters.a)
    for spec in specs + refused:
        for p in range(spec.partitions):
            producer.produce(spec.name, key=b"k", value=spec.name.encode(), partition=p)
    assert producer.flush(10) == 0

    feed = services.start_feed("many", clusters, [f"{prefix}-.*"], rename_format="${topic}.x")
    wanted = {f"{s.name}.x": s for s in specs}
    admin_b = clients.admin(clusters.b.config)
    deadline = time.monotonic() + 60
    while not wanted.keys() <= admin_b.list_topics(timeout=5).topics.keys():
        assert time.monotonic() < deadline, feed.logs()
        time.sleep(0.5)
    copies = sum(s.partitions for s in specs)
    target = read_many(clusters.b.config, list(wanted), expect=copies, timeout_s=90)
    assert sorted(r.value for r in flatten(target)) == sorted(
        s.name.encode() for s in specs for _ in range(s.partitions)
    )
    for name, spec in wanted.items():
        assert len(admin_b.list_topics(name, timeout=5).topics[name].partitions) == spec.partitions
        assert overridden_configs(admin_b, name) == spec.config
    feed.wait_state("error")
    feed.assert_running()
    errors = [s["last_error"] for s in feed.statuses().values() if s and s.get("last_error")]
    assert errors, feed.logs()
    for error in errors:
        assert f"cannot create target topic {collides}.x" in error, error
        assert f"illegal topic name for {too_long!r}" in error, error
    assert f"{collides}.x" not in admin_b.list_topics(timeout=5).topics


def test_rename_format_names_the_target_topics(clusters, services, topic_factory):
    name = topic_factory(clusters.a, partitions=2)
    produced = produce_mixed(clusters.a.config, [name], 2, 500, seed=4, abort_every=None)
    feed = services.start_feed("rename", clusters, [name], rename_format="${topic}.from-a")
    renamed = f"{name}.from-a"
    source = read_many(clusters.a.config, [name])
    target = read_many(clusters.b.config, [renamed], expect=len(produced), timeout_s=60)
    verify_mirror(
        source,
        target,
        source_cluster_id=clusters.a.cluster_id,
        target_cluster_id=clusters.b.cluster_id,
        rename=lambda topic: f"{topic}.from-a",
    ).assert_ok(feed.logs())
    assert name not in clients.admin(clusters.b.config).list_topics(timeout=10).topics


def test_records_of_the_four_header_form_neither_loop_nor_lose_provenance(
    clusters, services, unique
):
    """A feed upgraded mid-stream: dc-b holds copies an older puller wrote with the four
    provenance headers, copies of the current form, and its own records. The dc-b → dc-a
    puller copies back none of those that were on dc-a (either form), and copies the others
    with one crossfeed-prov that keeps every hop and the origin topic of the old form."""
    name = unique("upgraded")
    a_id, b_id, c_id = clusters.a.cluster_id, clusters.b.cluster_id, "third-cluster-id-0000"
    admin = clients.admin(clusters.b.config)  # kept alive until the future resolves
    admin.create_topics([NewTopic(name, 2, 1)])[name].result(30)

    def legacy(origin: str, origin_topic: str, offset: int) -> list[tuple[str, bytes]]:
        return [
            (headers.ORIGIN_CLUSTER, origin.encode()),
            (headers.ORIGIN_TOPIC, origin_topic.encode()),
            (headers.HOPS, origin.encode()),
            (headers.SRC, f"{origin}/{origin_topic}/0/{offset}".encode()),
        ]

    kinds = {
        "from-a, old form": lambda n: legacy(a_id, name, n),
        "from-a, new form": lambda n: [(headers.PROV, f"{a_id}/{name}/0/{n}".encode())],
        "from-c, old form": lambda n: legacy(c_id, "orders.c", n),
        "own": lambda n: [],
    }
    producer = clients.producer(clusters.b.config)
    written = []  # (kind, partition, n) in the order they land per partition
    for n in range(400):
        kind = list(kinds)[n % 4]
        partition = n % 2
        hdrs = [("user", b"%d" % n), *kinds[kind](n)]
        producer.produce(name, b"v%d" % n, b"k%d" % n, partition=partition, headers=hdrs)
        written.append((kind, partition, n))
    assert producer.flush(30) == 0

    feed = services.start_feed("upgraded", clusters, [name], source="dc-b", target="dc-a")
    copyable = [w for w in written if w[0] in ("from-c, old form", "own")]
    read_many(clusters.a.config, [name], expect=len(copyable), timeout_s=120)
    time.sleep(3)  # a looping copy would arrive after the expected ones
    a_records = flatten(read_many(clusters.a.config, [name]))
    assert len(a_records) == len(copyable), feed.logs()

    source = {(r.partition, r.value): r for r in flatten(read_many(clusters.b.config, [name]))}
    for record in a_records:
        original = source[(record.partition, record.value)]
        n = int(record.value[1:])
        expected_prov = f"{b_id}/{name}/{record.partition}/{original.offset}"
        if list(kinds)[n % 4] == "from-c, old form":  # folded: C first, origin topic kept
            expected_prov = f"{c_id},{expected_prov}/orders.c"
        assert record.headers == (("user", b"%d" % n), (headers.PROV, expected_prov.encode()))
    refused, dropped = len(written) - len(copyable), None
    deadline = time.monotonic() + 15  # the puller's metrics follow its commits
    while time.monotonic() < deadline and dropped != refused:
        dropped = feed.pullers[0].metric("crossfeed_puller_loop_dropped_records_total")
        time.sleep(0.5)
    assert dropped == refused
