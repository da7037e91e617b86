"""The client library against a real cluster: consumer timestamps and the change producer."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

from crossfeed.client import ChangeProducer, TimestampedConsumer, is_watermark, user_headers
from crossfeed.client.producer import Change
from crossfeed.kafka import clients
from crossfeed.kafka.topics import config_value
from crossfeed.translation.kafka_io import shared_admin
from crossfeed.wire import codec, headers, topics
from tests.support.verify import read_many

pytestmark = pytest.mark.integration


def _stamps(config: dict[str, Any], group: str) -> dict[tuple[str, int], list[dict[str, Any]]]:
    """Every ConsumerTimestamp of ``group``, per (topic, partition), oldest first."""
    found = read_many(config, [topics.CONSUMER_TIMESTAMPS])[topics.CONSUMER_TIMESTAMPS]
    out: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for records in found.values():
        for r in records:
            if r.key is not None and r.key.startswith(f"{group}/".encode()) and r.value:
                value = codec.decode("ConsumerTimestamp", r.value)
                out.setdefault((value["topic"], value["partition"]), []).append(value)
    return out


def _poll(consumer: Any, n: int, timeout_s: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg)
    assert len(got) == n, f"{len(got)} of {n} records"
    return got


def test_consumer_timestamps_are_recorded_at_every_kind_of_commit(
    clusters, topic_factory, producer_factory, unique
):
    config = clusters.a.config
    topic = topic_factory(clusters.a, partitions=1)
    producer = producer_factory(clusters.a)
    base = int(time.time() * 1000) - 60_000
    for i in range(30):
        producer.produce(topic, value=f"v{i}".encode(), timestamp=base + i * 10)
    producer.flush(10)
    group = unique("ts")
    consumer = TimestampedConsumer(
        {
            **config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "timestamps.producer.client.id": "ts-producer",
        }
    )
    consumer.subscribe([topic])
    first = _poll(consumer, 10)
    consumer.commit(message=first[4], asynchronous=False)  # processed five
    consumer.commit(asynchronous=True)  # all ten (stored offsets), reported on poll
    # librdkafka reads the stored offsets when its own thread takes up the commit, not at
    # the call: reading on at once raced it on a busy machine (CI saw 20 committed here).
    time.sleep(1.0)
    _poll(consumer, 10)
    time.sleep(0.5)
    consumer.poll(0.5)  # the auto-commit of what was read is reported here
    consumer.close()

    stamps = _stamps(config, group)[(topic, 0)]
    seen = [s["committed_offset"] for s in stamps]
    assert seen[:2] == [5, 10] and seen[-1] >= 20, seen
    # Each records the timestamp of the last record before the committed offset.
    assert all(s["timestamp_ms"] == base + (s["committed_offset"] - 1) * 10 for s in stamps)
    assert all(s["group"] == group and s["committed_at_ms"] > 0 for s in stamps)
    admin = shared_admin(config).client()
    assert config_value(admin, topics.CONSUMER_TIMESTAMPS, "cleanup.policy") == "compact"


def test_change_producer_stamps_commit_ts_transactions_and_watermarks(
    clusters, topic_factory, unique
):
    config = clusters.a.config
    topic = topic_factory(clusters.a, partitions=3)
    producer = ChangeProducer({**config, "transactional.id": unique("changes")})
    txn, ts = producer.transaction(
        [Change(topic, f"c{i}".encode(), partition=i, headers=[("app", b"x")]) for i in range(3)],
        txn_id="t1",
    )
    later = producer.send(topic, b"single", partition=0)
    resolved = producer.resolved()
    assert txn == "t1" and later > ts and resolved == later
    with pytest.raises(ValueError, match="resolved watermark"):
        producer.send(topic, b"too-late", commit_ts_us=resolved)
    producer.close()

    records = [r for rs in read_many(config, [topic])[topic].values() for r in rs]
    data = [r for r in records if r.header(headers.TYPE) is None]
    marks = [r for r in records if r.header(headers.TYPE) == headers.TYPE_RESOLVED.encode()]
    txns = sorted(r.header(headers.TXN) for r in data if r.header(headers.TXN))
    assert txns == [b"t1/1/3", b"t1/2/3", b"t1/3/3"]
    assert {r.header(headers.COMMIT_TS) for r in data} == {str(ts).encode(), str(later).encode()}
    assert [r.user_headers for r in data if r.header(headers.TXN)] == [(("app", b"x"),)] * 3
    # resolved() marks every partition; close() marks each again as final (the producer
    # is gone: nothing of it will come below that)
    final = [m for m in marks if m.header(headers.WATERMARK) == headers.WATERMARK_FINAL.encode()]
    asked = [m for m in marks if m not in final]
    assert sorted(r.partition for r in asked) == [0, 1, 2]
    assert sorted(r.partition for r in final) == [0, 1, 2]
    for mark in marks:
        value = codec.decode("ResolvedMark", mark.value)
        assert (value["next_offset"], value["partition"]) == (-1, mark.partition)
        if mark in asked:
            assert value["resolved_ts_us"] == resolved
        else:
            assert value["resolved_ts_us"] >= resolved

    consumer = clients.consumer(config, **{"group.id": unique("read")})
    consumer.subscribe([topic])
    got = _poll(consumer, len(records))
    consumer.close()
    assert sum(1 for m in got if is_watermark(m)) == 6
    assert all(user_headers(m) in ([], [("app", b"x")]) for m in got)


def _recorded(config: dict[str, Any], group: str) -> dict[str, list[dict[str, Any]]]:
    """Every commit of ``group`` recorded in _crossfeed.consumer-timestamps, by key."""
    name = topics.DESTINATION_TIMESTAMPS
    out: dict[str, list[dict[str, Any]]] = {}
    for records in read_many(config, [name])[name].values():
        for r in records:
            key = (r.key or b"").decode()
            parsed = topics.parse_destination_timestamp_key(key)
            if parsed is not None and parsed[1] == group and r.value:
                out.setdefault(key, []).append(codec.decode("ConsumerTimestamp", r.value))
    return out


def _opted_in(clusters: Any, topic: str, group: str, destination: str, wait_ms: int) -> Any:
    """A subscribed TimestampedConsumer on dc-a with the opt-in, committing by hand."""
    consumer = TimestampedConsumer(
        {
            **clusters.a.config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "timestamps.destination.bootstrap.servers": destination,
            "timestamps.destination.wait.ms": wait_ms,
        }
    )
    consumer.subscribe([topic])
    return consumer


def _filled(clusters: Any, topic_factory: Any, producer_factory: Any, partitions: int) -> str:
    """A dc-a topic with 10 records in each partition."""
    topic = topic_factory(clusters.a, partitions=partitions)
    producer = producer_factory(clusters.a)
    for i in range(10 * partitions):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % partitions)
    producer.flush(10)
    return topic


def test_with_the_opt_in_each_commit_is_on_the_destination_when_commit_returns(
    clusters, topic_factory, producer_factory, unique
):
    topic = _filled(clusters, topic_factory, producer_factory, 2)
    group = unique("mirrored")
    consumer = _opted_in(clusters, topic, group, clusters.b.bootstrap, 5000)
    got = _poll(consumer, 20)
    committed = consumer.commit(asynchronous=False)
    # Nothing more is sent after commit() returned: what dc-b holds now was acknowledged.
    stats = consumer.destination_stats()
    recorded = _recorded(clusters.b.config, group)
    consumer.close()

    source_id = clients.cluster_id(clusters.a.config)
    assert committed is not None and {tp.offset for tp in committed} == {10}
    assert stats == {"recorded": 2, "failed": 0, "waits_expired": 0}
    assert sorted(recorded) == [f"{source_id}/{group}/{topic}/{p}" for p in (0, 1)]
    for p in (0, 1):
        [value] = recorded[f"{source_id}/{group}/{topic}/{p}"]
        last = [m for m in got if m.partition() == p][-1]
        assert (value["committed_offset"], value["timestamp_ms"]) == (10, last.timestamp()[1])
    admin = shared_admin(clusters.b.config).client()
    assert config_value(admin, topics.DESTINATION_TIMESTAMPS, "cleanup.policy") == "compact"


def test_a_destination_that_does_not_answer_costs_one_wait_and_never_a_commit(
    clusters, topic_factory, producer_factory, unique
):
    topic = _filled(clusters, topic_factory, producer_factory, 1)
    group = unique("nowhere")
    consumer = _opted_in(clusters, topic, group, "127.0.0.1:9", 300)  # nothing listens there
    took = []
    for n in range(5):
        msg = _poll(consumer, 1)[0]
        began = time.monotonic()
        consumer.commit(message=msg, asynchronous=False)
        took.append(time.monotonic() - began)
        assert msg.offset() == n
    stats = consumer.destination_stats()
    admin = clients.admin(clusters.a.config)
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    offsets = {tp.partition: tp.offset for tp in listed[group].result(10).topic_partitions}
    threading.Thread(target=consumer.close, daemon=True).start()

    assert offsets == {0: 5}, "every commit reached the source"
    assert stats is not None and stats["waits_expired"] == 1 and stats["recorded"] == 0, stats
    assert 0.25 <= took[0] < 2.0, took  # the first commit waited wait.ms ...
    assert max(took[1:]) < 0.25, took  # ... the others did not wait for a dead destination


def test_a_fenced_transactional_change_producer_fails_with_the_kafka_error(
    clusters, topic_factory, unique
):
    """A second ChangeProducer with the same transactional.id fences the first (a
    restarted application and its zombie): the zombie's next transaction must fail with
    the KafkaException that says so, not a SystemError from its delivery report."""
    config = {**clusters.a.config, "transactional.id": unique("fenced")}
    topic = topic_factory(clusters.a)
    zombie = ChangeProducer(config)
    zombie.send(topic, b"before")
    successor = ChangeProducer(config)
    with pytest.raises(KafkaException) as raised:
        zombie.send(topic, b"from the zombie")
    assert clients.is_fenced(raised.value.args[0]), raised.value
    successor.send(topic, b"after")
    successor.close()
    values = [r.value for rs in read_many(clusters.a.config, [topic])[topic].values() for r in rs]
    assert b"from the zombie" not in values and {b"before", b"after"} <= set(values)
