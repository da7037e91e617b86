"""Writing translations to the target: GroupCheckpoints and the groups' own offsets.

* GroupCheckpoints go to ``_crossfeed.checkpoints`` only when they changed (the topic is
  compacted; a steady group costs nothing per tick).
* A group is moved only while it has no active members on the target (Kafka itself
  refuses otherwise), and only forwards: a group ahead of its translation has consumed
  on the target (active-active, or after a failover) and going back would re-read. The
  same rule makes a repeated failover or failback harmless.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from crossfeed.kafka import clients
from crossfeed.translation import kafka_io, metrics
from crossfeed.translation.checkpoints import (
    FEED_ROW,
    StoredCheckpoint,
    checkpoint_key,
    ensure_topic,
    read_checkpoints,
)
from crossfeed.translation.kafka_io import TP, Unreachable
from crossfeed.translation.results import PartitionTranslation, TickReport
from crossfeed.translation.rpo import PartitionRpo
from crossfeed.wire import codec, topics

log = logging.getLogger(__name__)

Signature = tuple[int, int, bool, int, int]
"""(source offset, target offset, exact, gap, source log start) of a written checkpoint."""


class Destination:
    """The target side of one feed's translator (not thread-safe: the owner locks)."""

    def __init__(self, feed: str, alias: str, conf: dict[str, Any]) -> None:
        self.feed = feed
        self.alias = alias
        self.conf = conf
        self.admin = kafka_io.shared_admin(conf)
        self.producer = clients.producer(conf, **{"linger.ms": 5})
        self.written: dict[tuple[str, str, int], Signature] = {}
        self.moved: dict[str, dict[TP, int]] = {}
        self.topic_ready = False
        self.cluster_id: str | None = None

    def close(self) -> None:
        self.producer.flush(5)

    def ensure_topic(self) -> None:
        if self.topic_ready:
            return
        try:
            ensure_topic(self.conf)
            self.topic_ready = True
        except Exception as err:  # retried next round; the checkpoints wait until then
            log.warning("feed %s: cannot create %s: %s", self.feed, topics.CHECKPOINTS, err)

    def checkpoints(self, results: Iterable[PartitionTranslation], source_cluster: str) -> int:
        """Write the checkpoints that changed; returns how many."""
        count = 0
        for r in results:
            if r.target_offset is None:
                continue
            signature = (r.source_offset, r.target_offset, r.exact, r.gap, r.source_log_start)
            if self._put(
                r.group, r.topic, r.partition, signature, r.checkpoint(self.feed, source_cluster)
            ):
                count += 1
        if count:
            self.flush()
            metrics.CHECKPOINTS.labels(self.feed).inc(count)
        return count

    def feed_row(
        self, row: PartitionRpo, target: TP, source_cluster: str, log_start: int = -1
    ) -> None:
        """The feed's own row of one partition (group ``""``, see checkpoints.py), with the
        source's log start as known (read back after a restart while the source is down)."""
        assert row.source_end is not None and row.target_frontier is not None
        exact = row.unreplicated == 0
        record = {
            "feed": self.feed,
            "group": FEED_ROW,
            "topic": row.topic,
            "partition": row.partition,
            "source_offset": row.source_end,
            "target_topic": target[0],
            "target_partition": target[1],
            "target_offset": row.target_frontier,
            "exact": exact,
            "gap_records": row.unreplicated,
            "source_cluster": source_cluster,
            "translated_at_ms": row.known_at_ms,
            "source_log_start": log_start,
        }
        signature = (row.source_end, row.target_frontier, exact, row.unreplicated, log_start)
        self._put(FEED_ROW, row.topic, row.partition, signature, record)

    def recall(self) -> dict[tuple[str, str, int], StoredCheckpoint]:
        """The checkpoints the feed wrote before (read back at start), remembered as
        written so an unchanged one is not written again."""
        rows = read_checkpoints(self.conf, self.feed, timeout_s=10)
        for key, row in rows.items():
            self.written[key] = (
                row.source_offset,
                row.target_offset,
                row.exact,
                row.gap_records,
                row.source_log_start,
            )
        return rows

    def ensure_cluster_id(self) -> None:
        """Ask the target for its cluster id until it answers (scans classify copies of
        target records by it)."""
        if self.cluster_id is None:
            self.cluster_id = clients.cluster_id(self.conf, 5.0)

    def _put(
        self, group: str, topic: str, partition: int, signature: Signature, record: dict[str, Any]
    ) -> bool:
        key = (group, topic, partition)
        if self.written.get(key) == signature:
            return False
        value = codec.encode("GroupCheckpoint", record)
        clients.produce_waiting(
            self.producer, topics.CHECKPOINTS, key=checkpoint_key(self.feed, *key), value=value
        )
        # Remembered before delivery: flush() raises if it fails, and the caller's next
        # round starts from a fresh signature check only for what was delivered.
        self.written[key] = signature
        return True

    def flush(self) -> None:
        if self.producer.flush(10):
            self.written.clear()  # unsure what arrived: write everything again next round
            raise Unreachable(f"checkpoints not delivered to {topics.CHECKPOINTS} within 10s")

    def move_groups(
        self, results: Iterable[PartitionTranslation], report: TickReport, *, recheck: bool
    ) -> None:
        """Move every group without members on the target forward to its translation.

        ``recheck``: look at every group again, even those unchanged since last moved.
        A partition ``held`` (its position in records deleted at the source, under
        gap.policy=stop) is not moved."""
        wanted: dict[str, dict[TP, int]] = {}
        for r in results:
            if r.target_offset is not None and not r.held:
                wanted.setdefault(r.group, {})[(r.target_topic, r.target_partition)] = (
                    r.target_offset
                )
        todo = {g: o for g, o in wanted.items() if recheck or self.moved.get(g) != o}
        if not todo:
            return
        members = kafka_io.active_members(self.admin, todo)
        for group, offsets in sorted(todo.items()):
            if members.get(group, 0) > 0:
                report.active.append(group)
                continue
            current = kafka_io.group_offsets(self.admin, [group]).get(group, {})
            moves = {tp: o for tp, o in offsets.items() if current.get(tp, -1) < o}
            if moves:
                try:
                    kafka_io.commit_group_offsets(self.admin, group, moves)
                except Unreachable as err:  # a member joined meanwhile: it commits itself
                    log.info("feed %s: group %s not moved: %s", self.feed, group, err)
                    continue
                report.committed[group] = len(moves)
                metrics.OFFSETS_COMMITTED.labels(self.feed).inc(len(moves))
                log.info(
                    "feed %s: group %s moved on %s: %s",
                    self.feed,
                    group,
                    self.alias,
                    ", ".join(f"{t}/{p}@{o}" for (t, p), o in sorted(moves.items())),
                )
            self.moved[group] = offsets
