"""Gaps in the source: records deleted before they were copied (core/gaps.py).

A gap is reported (log, metric, status, the marks of its partition, so a restart or a
new owner reports it again) until the feed's gap.acknowledged names it; gap.policy says
whether its partition goes on past it or waits. A position past the source's log end is
no gap: that partition is not read again by this instance (never copied twice).
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException

from crossfeed.core import gaps
from crossfeed.core.partitions import TopicPartition
from crossfeed.feeds import FeedSpec
from crossfeed.services.puller import metrics
from crossfeed.services.puller.source_reader import SourceReader
from crossfeed.services.puller.task import PullerTask
from crossfeed.services.puller.task_state import PartitionState

log = logging.getLogger(__name__)

# (topic, partition) of every source partition read -> its task and state (TaskSet.route).
RouteMap = dict[tuple[str, int], tuple[PullerTask, PartitionState]]


class SourceGaps:
    def __init__(self, feed: FeedSpec, reader: SourceReader, route: RouteMap) -> None:
        self.feed = feed
        self.reader = reader
        self.route = route
        # Gaps reported and not acknowledged, by key, and the partitions among them not
        # read until they are (gap.policy=stop); partitions whose position is past the
        # source's end.
        self.gaps: dict[str, gaps.Gap] = {}
        self.waiting: set[TopicPartition] = set()
        self.beyond_end: dict[TopicPartition, str] = {}

    def out_of_range(self, topic: str, partition: int, offset: int) -> None:
        """The source does not hold the offset the reader asked for (auto.offset.reset is
        error): a gap below the log start (reported, then gap.policy), a transient miss
        (read there again), or a position past the log end (stopped: never copied twice)."""
        found = self.route.get((topic, partition))
        if found is None:
            return
        task, state = found
        tp = state.tp
        position = offset if offset >= 0 else task.position(tp)
        try:
            low, high = self.reader.watermarks(tp, cached=False)
        except KafkaException as err:
            log.warning(
                "%s: out of range at %d, log not known (%s); reading again", tp, offset, err
            )
            self.reader.reassign(tp, position)
            return
        where = gaps.classify(position, low, high)
        if where is gaps.Position.READABLE:
            log.info(
                "%s: offset %d is in the log again (%d-%d): reading there", tp, position, low, high
            )
            self.reader.reassign(tp, position)
        elif where is gaps.Position.BEYOND_END:
            self.beyond_end[tp] = (
                f"{tp}: the next offset to copy, {position}, is past the source's log end "
                f"{high} (the source lost records it had served: an unclean leader election, a "
                f"topic deleted and created again?); not copied until its task restarts"
            )
            log.error("feed %s: %s", self.feed.name, self.beyond_end[tp])
            self.reader.unassign([tp])
        else:
            self.report(task, state, gaps.gap_at(tp, position, low))

    def report(self, task: PullerTask, state: PartitionState, gap: gaps.Gap) -> None:
        """Report ``gap`` (log, metric, status) and do what gap.policy says, unless it was
        acknowledged already (then go on from the log start)."""
        feed, policy = self.feed.name, self.feed.config.gap_policy
        acked = gap.key in gaps.acknowledged(self.feed.config.gap_acknowledged)
        if self.gaps.get(gap.key) != gap:  # not the same report again (a task restart)
            log.error("feed %s: %s", feed, gap.describe(feed, policy, acknowledged=acked))
            metrics.GAP_RECORDS.labels(*state.labels).inc(gap.count)
        if not acked:
            self.gaps[gap.key] = gap
            state.gaps = (*(g for g in state.gaps if g.key != gap.key), gap)
        if acked or policy == "continue":
            self._skip(task, state, gap)
        else:
            self.waiting.add(gap.tp)
            self.reader.unassign([gap.tp])
        self.count()

    def restore(self, state: PartitionState, text: str) -> None:
        """The gaps a partition's newest mark carried: reported before (by this instance
        before a restart, or by an earlier owner of the task) and not acknowledged then;
        reported again here, and carried on, until they are."""
        if not text:
            return
        try:
            found = gaps.carried(state.tp, text)
        except ValueError as err:
            log.warning("%s: the gaps its mark carried are not readable: %s", state.tp, err)
            return
        acks = gaps.acknowledged(self.feed.config.gap_acknowledged)
        kept = tuple(g for g in found if g.key not in acks)
        state.gaps = kept
        for gap in kept:
            self.gaps[gap.key] = gap
            log.warning(
                "feed %s: %s (reported before, not acknowledged yet)",
                self.feed.name,
                gap.describe(self.feed.name, self.feed.config.gap_policy),
            )
        self.count()

    def count(self) -> None:
        metrics.WAITING_GAPS.labels(self.feed.name).set(len(self.waiting))
        metrics.UNACKNOWLEDGED_GAPS.labels(self.feed.name).set(len(self.gaps))

    def _skip(
        self, task: PullerTask, state: PartitionState, gap: gaps.Gap, *, assigned: bool = True
    ) -> None:
        """Go on after ``gap``: its dead letter and the partition's position past it in
        the next transaction, the reader at the log start (``assigned``: the reader still
        has the partition, in librdkafka's error state)."""
        task.gap_letter(state, gap)
        self.reader.reassign(gap.tp, gap.end, assigned=assigned)

    def apply_acks(self) -> None:
        """Gaps the feed's gap.acknowledged now names: no longer reported, and a waiting
        partition goes on from the log start as it is now (retention may have deleted
        more meanwhile: that is counted and written into the dead letter too)."""
        acks = gaps.acknowledged(self.feed.config.gap_acknowledged)
        for key, gap in sorted(self.gaps.items()):
            if key not in acks:
                continue
            del self.gaps[key]
            log.info("feed %s: gap %s acknowledged", self.feed.name, key)
            tp = gap.tp
            found = self.route.get((tp.topic, tp.partition))
            if found is not None:  # its marks stop carrying it
                found[1].gaps = tuple(g for g in found[1].gaps if g.key != key)
            if tp not in self.waiting or found is None:
                continue
            self.waiting.discard(tp)
            task, state = found
            try:
                low, _ = self.reader.watermarks(tp, cached=False)
            except KafkaException as err:
                log.warning("%s: log start not known (%s); trying from the gap's end", tp, err)
                low = gap.end
            if low > gap.end:
                metrics.GAP_RECORDS.labels(*state.labels).inc(low - gap.end)
                gap = gaps.Gap(tp, gap.first, low)
            self._skip(task, state, gap, assigned=False)  # unassigned while it waited
        self.count()

    def release(self, tps: set[TopicPartition]) -> set[TopicPartition]:
        """A task's partitions leave this instance: returns those not assigned to the
        reader now (waiting on a gap, or past the source's end); the next owner finds them
        again where they stand, and reports their gaps from the marks."""
        unread = tps & (self.waiting | set(self.beyond_end))
        for tp in tps:
            self.waiting.discard(tp)
            self.beyond_end.pop(tp, None)
        self.gaps = {k: g for k, g in self.gaps.items() if g.tp not in tps}
        self.count()
        return unread

    def problems(self) -> list[str]:
        return [self.beyond_end[tp] for tp in sorted(list(self.beyond_end))]

    def notices(self) -> list[str]:
        policy = self.feed.config.gap_policy
        return [g.describe(self.feed.name, policy) for g in sorted(list(self.gaps.values()))]

    def status(self) -> list[dict[str, object]]:
        return [
            {
                "partition": str(gap.tp),
                "first": gap.first,
                "last": gap.last,
                "count": gap.count,
                "key": gap.key,
                "waiting": gap.tp in self.waiting,
            }
            for gap in sorted(list(self.gaps.values()))
        ]
