"""A mirror task's marks checked against its copies in the target, on real brokers.

A task's transaction holds its copies (target partitions) and its marks (its changes
partition). A stress run that killed dc-b every few seconds found one transaction
committed on the changes partition and aborted on a target partition: the marks moved
past 80 records whose copies no reader sees. The opposite split copies a transaction
twice. Both states are written here as an earlier owner of the task would have left
them, and a puller started on them must still leave every record in the target exactly
once (crossfeed/core/resume.py).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from crossfeed.core import provenance
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.wire import headers, records
from tests.support.clusters import Clusters
from tests.support.verify import Record, flatten, read_many, verify_mirror

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

RECORDS = 300


def _copy(producer: Any, topic: str, source: Record, source_cluster_id: str) -> None:
    """The copy a puller writes: same partition, key, value, timestamp; provenance added."""
    stamped = provenance.stamp(
        list(source.headers),
        source_cluster_id=source_cluster_id,
        source_topic=source.topic,
        partition=source.partition,
        offset=source.offset,
    )
    producer.produce(
        topic,
        source.value,
        source.key,
        partition=source.partition,
        timestamp=source.timestamp_ms,
        headers=stamped,
    )


SPLITS = pytest.mark.parametrize(
    ("marked", "committed", "aborted"),
    [(150, 100, 150), (100, 150, 150)],
    ids=["marks-committed-copies-aborted", "copies-committed-marks-behind"],
)


def _leave_split_state(
    clusters: Clusters, feed: Any, ordered: list[Record], marked: int, committed: int, aborted: int
) -> None:
    """What an earlier owner of the task left: copies of ``ordered`` (some committed,
    some aborted) and a committed mark that does not agree with them."""
    topic = ordered[0].topic
    admin = clients.admin(clusters.b.config)
    kafka_topics.ensure_topic(admin, topic, 1, None)
    kafka_topics.ensure_topic(admin, feed.changes_topic, 1, None)
    earlier = clients.transactional_producer(clusters.b.config, f"earlier-{feed.name}-{topic}")
    earlier.begin_transaction()
    for record in ordered[:committed]:
        _copy(earlier, topic, record, clusters.a.cluster_id)
    earlier.commit_transaction(30)
    earlier.begin_transaction()
    for record in ordered[committed:aborted]:
        _copy(earlier, topic, record, clusters.a.cluster_id)
    assert earlier.flush(30) == 0
    earlier.abort_transaction(30)
    earlier.begin_transaction()
    mark = records.resolved_mark(
        source_cluster=clusters.a.cluster_id,
        topic=topic,
        partition=0,
        resolved_ts_us=0,
        next_offset=marked,
    )
    earlier.produce(
        feed.changes_topic,
        mark,
        records.mark_key(topic, 0),
        partition=0,
        headers=[headers.MARK_HEADER],
    )
    earlier.commit_transaction(30)


def _verify(clusters: Clusters, feed: Any, topic: str, puller: Any, marked: int) -> None:
    source = read_many(clusters.a.config, [topic])
    target = read_many(clusters.b.config, [topic], expect=RECORDS, timeout_s=60)
    verify_mirror(
        source,
        target,
        source_cluster_id=clusters.a.cluster_id,
        target_cluster_id=clusters.b.cluster_id,
    ).assert_ok(feed.logs())
    # and it said so
    assert f"the marks say {marked}, the copies in" in puller.log_path.read_text()


@SPLITS
def test_a_task_resumes_where_its_copies_end(
    clusters: Clusters,
    services: Any,
    topic_factory: Any,
    marked: int,
    committed: int,
    aborted: int,
) -> None:
    topic = topic_factory(clusters.a, partitions=1)
    producer = clients.producer(clusters.a.config)
    for i in range(RECORDS):
        producer.produce(topic, f"value-{i}".encode(), f"key-{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    ordered = flatten(read_many(clusters.a.config, [topic]))
    assert len(ordered) == RECORDS

    feed = services.start_feed(
        "resume", clusters, [topic], pullers=0, config={"staging.partitions": "1"}, wait=False
    )
    _leave_split_state(clusters, feed, ordered, marked, committed, aborted)
    puller = feed.add_puller()
    feed.wait_ready()
    _verify(clusters, feed, topic, puller, marked)


@SPLITS
def test_a_topic_found_while_its_task_runs_resumes_where_its_copies_end(
    clusters: Clusters,
    services: Any,
    unique: Any,
    marked: int,
    committed: int,
    aborted: int,
) -> None:
    """The task was opened before its puller saw the topic (an earlier owner copied it):
    the topic's marks are checked when it joins the running task, as at an opening."""
    prefix = unique("found")
    first, later = f"{prefix}-first", f"{prefix}-later"
    admin_a = clients.admin(clusters.a.config)
    kafka_topics.ensure_topic(admin_a, first, 1, None)
    feed = services.start_feed(
        "found", clusters, [f"{prefix}-.*"], config={"staging.partitions": "1"}
    )
    # The later topic's records as they will sit in the source, fresh topic from offset 0,
    # so that its copies can be written before the source topic exists.
    base_ms = int(time.time() - 3600) * 1000  # within the topics' time retention
    ordered = [
        Record(later, 0, i, f"key-{i}".encode(), f"value-{i}".encode(), (), base_ms + i)
        for i in range(RECORDS)
    ]
    _leave_split_state(clusters, feed, ordered, marked, committed, aborted)
    kafka_topics.ensure_topic(admin_a, later, 1, None)
    producer = clients.producer(clusters.a.config)
    for r in ordered:
        producer.produce(later, r.value, r.key, partition=0, timestamp=r.timestamp_ms)
    assert producer.flush(30) == 0
    assert flatten(read_many(clusters.a.config, [later])) == ordered
    _verify(clusters, feed, later, feed.pullers[0], marked)
