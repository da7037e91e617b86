"""``failback --replay-extra``: copy the old primary's extra data to the standby, once.

The extra data of a source partition is what lies between the forward feed's replicated
frontier and the old primary's end. It is copied the way the feed itself would have —
provenance stamped, read_committed, loops dropped — in transactions that also hold the
copies' OffsetSyncs and the feed's new puller positions (ResolvedMarks in the task's
partition of ``_crossfeed.<feed>.changes``, under the puller task's own transactional.id,
which fences a puller of that task still running) — just as the puller's own
transactions do. So the copy is exactly once: a crash aborts it, a rerun finds the
frontier moved, and the forward feed, if ever resumed, starts after the copied records.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Final

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed import positions
from crossfeed.config import Settings
from crossfeed.core import provenance
from crossfeed.core.offset_ranges import OffsetSyncWriter
from crossfeed.core.partitions import TopicPartition, staging_partition
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.wire import headers, ids, records, topics

_MARKS: Any = [headers.MARK_HEADER]  # confluent-kafka's stubs want str | bytes values
CHUNK: Final = 5_000
"""Records per transaction."""
READ_TIMEOUT_S: Final = 30.0


@dataclass(frozen=True, slots=True)
class ExtraRange:
    """Source offsets ``[start, end)`` of one partition to copy."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass
class Copied:
    records: int = 0
    target_next: int = -1
    """Target offset after the last copy (-1: nothing copied)."""


def replay(
    settings: Settings,
    feed: FeedSpec,
    ranges: list[ExtraRange],
    source_cluster_id: str,
    target_cluster_id: str,
) -> dict[tuple[str, int], Copied]:
    """Copy every range; returns what was copied per source partition."""
    source_conf = settings.cluster(feed.source).client_config()
    target_conf = settings.cluster(str(feed.sink.cluster)).client_config()
    tasks: dict[int, list[ExtraRange]] = defaultdict(list)
    for r in ranges:
        tasks[staging_partition(r.topic, r.partition, feed.config.staging_partitions)].append(r)
    reader = clients.consumer(source_conf, **{"group.id": f"crossfeed-replay-{feed.name}"})
    copied: dict[tuple[str, int], Copied] = {}
    try:
        for s, task_ranges in sorted(tasks.items()):
            copier = _TaskCopier(feed, s, target_conf, reader, source_cluster_id, target_cluster_id)
            try:
                for r in task_ranges:
                    copied[(r.topic, r.partition)] = copier.copy(r)
            finally:
                clients.flush(copier.producer, 10)
    finally:
        reader.close()
    return copied


class _TaskCopier:
    """Copies the ranges of one puller task under that task's transactional.id."""

    def __init__(
        self,
        feed: FeedSpec,
        task: int,
        target_conf: dict[str, Any],
        reader: Any,
        source_cluster_id: str,
        target_cluster_id: str,
    ) -> None:
        self.feed = feed
        self.task = task
        self.reader = reader
        self.source_id = source_cluster_id
        self.target_id = target_cluster_id
        self.changes = topics.changes(feed.name)
        # Fences the task's puller, if one still runs.
        self.producer = clients.transactional_producer(
            target_conf,
            ids.puller_transactional_id(feed.name, task),
            init_timeout_s=30,
            **{"transaction.timeout.ms": 60_000, "linger.ms": 10},
        )
        recovered = positions.recover(target_conf, self.changes, task, set())
        self.marks: dict[TopicPartition, int] = dict(recovered or {})

    def copy(self, r: ExtraRange) -> Copied:
        done = Copied()
        position = r.start
        while position < r.end:
            position = self._chunk(r, position, done)
        return done

    def _chunk(self, r: ExtraRange, start: int, done: Copied) -> int:
        """One transaction: up to CHUNK copies, their syncs, the task's marks."""
        target_topic = self.feed.target_topic(r.topic)
        self.reader.assign([KafkaTP(r.topic, r.partition, start)])
        sources: list[int] = []
        targets: list[int] = []
        errors: list[KafkaError] = []

        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                targets.append(msg.offset())

        self.producer.begin_transaction()
        position = start
        deadline = time.monotonic() + READ_TIMEOUT_S
        try:
            while position < r.end and len(sources) < CHUNK:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"reading {r.topic}/{r.partition} from {start} stalled at {position}"
                    )
                batch: list[Any] = self.reader.consume(500, timeout=0.5)
                if not batch:
                    here = self.reader.position([KafkaTP(r.topic, r.partition)])[0].offset
                    position = max(position, min(here, r.end))
                for msg in batch:
                    if msg.error() is not None:
                        continue
                    if msg.offset() >= r.end:
                        position = r.end
                        break
                    position = msg.offset() + 1
                    hdrs = msg.headers() or []
                    if not provenance.should_copy(hdrs, self.target_id):
                        continue  # it came from the standby: never copy it back
                    stamped: Any = provenance.stamp(
                        hdrs,
                        source_cluster_id=self.source_id,
                        source_topic=r.topic,
                        partition=r.partition,
                        offset=msg.offset(),
                    )
                    self.producer.produce(
                        target_topic,
                        value=msg.value(),
                        key=msg.key(),
                        partition=r.partition,
                        headers=stamped,
                        timestamp=max(msg.timestamp()[1], 0),
                        on_delivery=delivered,
                    )
                    sources.append(msg.offset())
                    if len(sources) >= CHUNK:
                        break
            clients.flush(self.producer, 60)
            if errors or len(targets) != len(sources):
                raise KafkaException(errors[0] if errors else KafkaError(KafkaError._FAIL))
            writer = OffsetSyncWriter()
            for s, t in zip(sources, targets, strict=True):
                writer.add(s, t)
            for run in writer.flush():
                sync = records.offset_sync(
                    feed=self.feed.name,
                    source_cluster=self.source_id,
                    topic=r.topic,
                    partition=r.partition,
                    target_topic=self.feed.target_topic(r.topic),
                    target_partition=r.partition,
                    source_start=run.source_start,
                    source_end=run.source_end,
                    target_start=run.target_start,
                )
                key = records.offset_sync_key(self.feed.name, r.topic, r.partition)
                self.producer.produce(topics.OFFSET_SYNCS, key=key, value=sync)
            self.marks[TopicPartition(r.topic, r.partition)] = position
            now_us = int(time.time() * 1_000_000)
            for tp, next_offset in sorted(self.marks.items()):
                mark = records.resolved_mark(
                    source_cluster=self.source_id,
                    topic=tp.topic,
                    partition=tp.partition,
                    resolved_ts_us=now_us,
                    next_offset=next_offset,
                )
                self.producer.produce(
                    self.changes,
                    value=mark,
                    key=records.mark_key(tp.topic, tp.partition),
                    partition=self.task,
                    headers=_MARKS,
                )
            clients.served(self.producer.commit_transaction, 60)
        except BaseException as err:
            clients.abort_after(self.producer, err, 30)
            raise
        done.records += len(sources)
        if targets:
            done.target_next = targets[-1] + 1
        return position
