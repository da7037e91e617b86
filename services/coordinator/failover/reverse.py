"""The reverse feed of a failback: the standby copied back into the old primary.

Its spec is the forward feed's with source and target swapped. It starts, per standby
partition, where the forward feed's copies end there (the *forward frontier*): everything
before is the old primary's own data, which it already holds. Those start positions are
written as the reverse feed's puller positions — ResolvedMarks in its staging partitions
on the old primary, the same records its pullers commit — before any puller runs, so a
puller resumes from them as from its own. Provenance keeps the old primary's records
from going back either way: the puller drops a record whose hops hold its target.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from fastapi import HTTPException

from crossfeed import positions
from crossfeed.config import ConfigError, Settings
from crossfeed.core.partitions import TopicPartition, staging_partition
from crossfeed.core.topic_selection import DEFAULT_RENAME_FORMAT
from crossfeed.feeds import FEED_NAME_RE, FeedSpec, parse_feed
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.translation.kafka_io import shared_admin
from crossfeed.wire import headers, ids, records, topics

SUFFIX = "-reverse"
_NOT_READY = (KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
_MARKS: Any = [headers.MARK_HEADER]  # confluent-kafka's stubs want str | bytes values


def reverse_name(feed: str) -> str:
    """``<feed>-reverse``, shortened to a legal feed name."""
    return feed[: 63 - len(SUFFIX)] + SUFFIX


def reverse_spec(feed: FeedSpec, name: str) -> FeedSpec:
    """The forward feed with source and target swapped (start: earliest)."""
    if feed.rename_format != DEFAULT_RENAME_FORMAT:
        raise HTTPException(
            409,
            f"feed {feed.name} renames topics ({feed.rename_format!r}); its reverse cannot be "
            "derived: create the reverse feed yourself and pass its name with --reverse-feed",
        )
    if not FEED_NAME_RE.match(name):
        raise HTTPException(400, f"reverse feed name {name!r} is not a legal feed name")
    data = feed.model_dump(by_alias=True)
    data.update(
        {
            "name": name,
            "source": feed.sink.cluster,
            "sink-uri": f"kafka://{feed.source}",
            "start": "earliest",
            "config": feed.config.model_dump(by_alias=True, exclude_unset=True),
        }
    )
    try:
        return parse_feed(data, f"reverse of feed {feed.name}")
    except ConfigError as err:
        raise HTTPException(400, str(err)) from None


def _positions(conf: dict[str, Any], staging: str, task: int) -> Any:
    """A task's positions; a topic created a moment ago may not have its leader yet."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return positions.recover(conf, staging, task, set())
        except KafkaException as err:
            if not err.args[0].retriable() and err.args[0].code() not in _NOT_READY:
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def seed_positions(
    settings: Settings,
    reverse: FeedSpec,
    starts: dict[tuple[str, int], int],
    source_cluster_id: str,
) -> bool:
    """Write the reverse feed's first puller positions; False (nothing written) once any
    of its tasks has positions of its own."""
    conf = settings.cluster(str(reverse.sink.cluster)).client_config()
    staging = topics.changes(reverse.name)
    n = reverse.config.staging_partitions
    kafka_topics.ensure_internal(shared_admin(conf).client(), staging, n)
    if any(_positions(conf, staging, s) is not None for s in range(n)):
        return False
    tasks: dict[int, dict[TopicPartition, int]] = defaultdict(dict)
    for (topic, partition), offset in starts.items():
        tasks[staging_partition(topic, partition, n)][TopicPartition(topic, partition)] = offset
    for s, marks in sorted(tasks.items()):
        producer = clients.transactional_producer(
            conf, ids.puller_transactional_id(reverse.name, s), init_timeout_s=30
        )
        producer.begin_transaction()
        for tp, offset in sorted(marks.items()):
            mark = records.resolved_mark(
                source_cluster=source_cluster_id,
                topic=tp.topic,
                partition=tp.partition,
                resolved_ts_us=0,
                next_offset=offset,
            )
            producer.produce(
                staging,
                value=mark,
                key=records.mark_key(tp.topic, tp.partition),
                partition=s,
                headers=_MARKS,
            )
        producer.commit_transaction(30)
    return True
