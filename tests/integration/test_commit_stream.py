"""Group commits followed as a stream: translated on dc-b as they are made on dc-a.

The translator follows dc-a's ``__consumer_offsets`` (parsed by ``commit_log.py``, here
on what a real broker writes) and moves the group on dc-b as soon as a commit is read.
Translation rounds are 60 s apart in these tests, so a translation that appears within a
second can only have come from the stream; the rounds counter proves no round ran.
Where the commit log cannot be read — not there, or not allowed by the source's ACLs (the
secured dc-a of ``crossfeed local up --secure``: ``tests/support/secured.py``) — the
translator lists group offsets (poll) and says why.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from crossfeed.config import Settings
from crossfeed.core.provenance import src_of
from crossfeed.feeds import FeedSpec, load_feed_file
from crossfeed.kafka import clients
from crossfeed.services.coordinator.failover import TranslatorLoop
from crossfeed.translation import metrics
from crossfeed.translation.translator import Translator
from tests.integration.test_failover import committed, wait_for
from tests.support.clusters import Clusters
from tests.support.polling import retry_retriable
from tests.support.secured import add_user
from tests.support.verify import read_many

pytestmark = pytest.mark.integration

SLOW_ROUNDS = {"coordinator": {"translate_interval_s": 60.0}}
RECORDS = 400


def copies_by_source_offset(config: dict[str, Any], topic: str) -> dict[int, dict[int, int]]:
    """Per partition: source offset -> offset of its copy on the target."""
    out: dict[int, dict[int, int]] = {}
    for partition, records in read_many(config, [topic])[topic].items():
        for r in records:
            src = src_of(r.headers)
            if src:
                out.setdefault(partition, {})[src.offset] = r.offset
    return out


def rounds(feed: str) -> float:
    return float(metrics.TICKS.labels(feed)._value.get())


def test_a_commit_on_dc_a_is_translated_on_dc_b_within_a_second_without_a_round(
    clusters, services, topic_factory, unique, producer_factory
):
    a, b = clusters.a.config, clusters.b.config
    topic = topic_factory(clusters.a, partitions=2)
    producer = producer_factory(clusters.a)
    for i in range(RECORDS):
        producer.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    producer.flush(10)
    feed = services.start_feed("stream", clusters, [topic], settings=SLOW_ROUNDS)
    spec = load_feed_file(feed.feed_file)
    read_many(b, [topic], expect=RECORDS, timeout_s=120)
    copies = copies_by_source_offset(b, topic)
    assert sum(len(c) for c in copies.values()) == RECORDS

    loop = TranslatorLoop(clusters.settings(**SLOW_ROUNDS))
    loop.sync([spec])
    try:
        translator = loop.translator(spec.name)
        assert translator is not None
        wait_for("the first round", lambda: rounds(spec.name) >= 1, timeout_s=60)
        wait_for("the commit stream", lambda: translator.commit_mode == "stream", timeout_s=30)
        before = rounds(spec.name)

        group = unique("plain")
        consumer = clients.consumer(a, **{"group.id": group})  # a plain client, no wrapper
        consumer.assign([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        latencies: list[float] = []
        consumed = {0: 0, 1: 0}
        try:
            for step in range(6):
                partition = step % 2
                consumed[partition] += 17 + step  # not a batch boundary of anything
                source_offset = consumed[partition]
                consumer.commit(
                    offsets=[TopicPartition(topic, partition, source_offset)], asynchronous=False
                )
                made = time.monotonic()
                expected = copies[partition][source_offset]
                while committed(b, group).get((topic, partition)) != expected:
                    assert time.monotonic() - made < 5.0, (
                        f"commit {source_offset} on {topic}/{partition} not on dc-b after 5s: "
                        f"{committed(b, group)}"
                    )
                    time.sleep(0.01)
                latencies.append(time.monotonic() - made)
        finally:
            consumer.close()
        print(f"commit -> dc-b latencies (s): {[round(x, 3) for x in latencies]}")
        assert rounds(spec.name) == before, "a translation round ran: the stream proves nothing"
        assert max(latencies) < 1.0, latencies
        results = {(r.topic, r.partition): r for r in translator.results() if r.group == group}
        assert {tp: (r.source_offset, r.exact) for tp, r in results.items()} == {
            (topic, 0): (consumed[0], True),
            (topic, 1): (consumed[1], True),
        }
        assert loop.commit_modes() == {spec.name: "stream"}
    finally:
        loop.stop()


def test_without_the_commit_log_the_translator_polls_and_says_why(
    clusters, topic_factory, unique, producer_factory
):
    a = clusters.a.config
    topic = topic_factory(clusters.a)
    producer = producer_factory(clusters.a)
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode())
    producer.flush(10)
    group = unique("polled")
    consumer = clients.consumer(a, **{"group.id": group})
    retry_retriable(
        lambda: consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False),
        60,
        f"commit of group {group}",
    )
    consumer.close()

    name = f"nolog-{uuid.uuid4().hex[:8]}"
    spec = FeedSpec.model_validate(
        {"name": name, "source": "dc-a", "sink_uri": "kafka://dc-b", "topics": [topic]}
    )
    # A commit log that is not there stands in for one the translator may not read.
    translator = Translator(
        clusters.settings(**SLOW_ROUNDS), spec, commits_topic=unique("__no_commit_log")
    )
    try:
        assert translator.wait_ready(30)
        mode = wait_for(
            "the reason to poll",
            lambda: translator.commit_mode if "Unknown topic" in translator.commit_mode else None,
            timeout_s=15,
        )
        assert mode.startswith("poll ("), mode
        report = translator.tick()
        assert report.commits == mode
        positions = {
            (r.topic, r.partition): r.source_offset
            for r in translator.results()
            if r.group == group
        }
        assert positions == {(topic, 0): 7}
    finally:
        translator.close()


# -- a source that does not let the translator read its commit log ----------------------------


def test_without_the_right_to_read_the_commit_log_the_translator_polls_and_says_why(
    clusters, secure: Clusters, unique
):
    """On a cluster with ACLs: a user with no right on ``__consumer_offsets`` polls (and
    says it is not authorized); a super user of the same cluster follows the stream."""
    superuser = secure.a.config  # crossfeed's own user
    admin = clients.admin(superuser)
    topic = unique("acl")
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = clients.producer(superuser)
    for i in range(10):
        producer.produce(topic, value=f"v{i}".encode())
    producer.flush(10)
    group = unique("acl-group")
    consumer = clients.consumer(superuser, **{"group.id": group})
    retry_retriable(
        lambda: consumer.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False),
        60,
        f"commit of group {group}",
    )
    consumer.close()
    user = unique("limited")
    limited_conf = add_user(secure.a, user, f"{user}-password")
    limited = "User:" + user
    rights = [
        (ResourceType.TOPIC, topic, AclOperation.READ),
        (ResourceType.TOPIC, topic, AclOperation.DESCRIBE),
        (ResourceType.GROUP, "*", AclOperation.READ),
        (ResourceType.GROUP, "*", AclOperation.DESCRIBE),
        (ResourceType.BROKER, "kafka-cluster", AclOperation.DESCRIBE),  # BROKER: the cluster
    ]
    allow = AclPermissionType.ALLOW
    bindings = [
        AclBinding(kind, name, ResourcePatternType.LITERAL, limited, "*", op, allow)
        for kind, name, op in rights
    ]
    for future in admin.create_acls(bindings).values():
        future.result(30)

    settings = Settings(
        clusters={
            clusters.a.alias: clusters.a.config,
            clusters.b.alias: clusters.b.config,
            "src-limited": limited_conf,
            "src-admin": superuser,
        },
        control_cluster=clusters.b.alias,
        **SLOW_ROUNDS,
    )

    def feed(source: str) -> FeedSpec:
        name = f"{source}-{uuid.uuid4().hex[:8]}"
        return FeedSpec.model_validate(
            {"name": name, "source": source, "sink_uri": "kafka://dc-b", "topics": [topic]}
        )

    for source, expected_mode, known_from in (
        ("src-limited", "poll (__consumer_offsets: Broker: Topic authorization failed)", "listed"),
        ("src-admin", "stream", "commit-log"),
    ):
        translator = Translator(settings, feed(source))
        try:
            assert translator.wait_ready(30)
            wait_for(
                f"{source}: {expected_mode}",
                lambda t=translator, m=expected_mode: t.commit_mode == m,  # type: ignore[misc]
                timeout_s=20,
            )
            assert translator.tick().commits == expected_mode
            found = {
                (r.topic, r.partition): (r.source_offset, r.known_from)
                for r in translator.results()
                if r.group == group
            }
            assert found == {(topic, 0): (7, known_from)}, source
        finally:
            translator.close()
