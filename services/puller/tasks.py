"""The tasks this instance runs: the membership's host (membership.TaskHost) starts and
drops them here, and each source partition read is routed to its task (``route``)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed import positions
from crossfeed.config.settings import PullerSettings
from crossfeed.core.partitions import TopicPartition, staging_partition
from crossfeed.kafka import clients
from crossfeed.services.puller import metrics
from crossfeed.services.puller.copies import Route
from crossfeed.services.puller.discovery import Discovery
from crossfeed.services.puller.inputs import DebeziumInput, TopicsInput
from crossfeed.services.puller.resume_checks import Marks, ResumeChecks, start_offset
from crossfeed.services.puller.routes import Routes
from crossfeed.services.puller.source_gaps import RouteMap, SourceGaps
from crossfeed.services.puller.source_reader import SourceReader
from crossfeed.services.puller.task import PullerTask, transactional_id
from crossfeed.services.puller.task_state import FeedContext
from crossfeed.wire import topics

log = logging.getLogger(__name__)

STAGING_MAX_MESSAGE_BYTES = topics.STAGING_MAX_MESSAGE_BYTES
STAGING_HEADROOM_BYTES = topics.STAGING_HEADROOM_BYTES


class TaskSet:
    def __init__(
        self,
        ctx: FeedContext,
        opts: PullerSettings,
        target_conf: dict[str, Any],
        instance_id: str,
        *,
        discovery: Discovery,
        routes: Routes,
        reader: SourceReader,
        gaps: SourceGaps,
        feed_input: DebeziumInput | TopicsInput,
        route: RouteMap,
    ) -> None:
        self.ctx, self.opts = ctx, opts
        self.target_conf, self.instance_id = target_conf, instance_id
        self.discovery, self.routes, self.reader = discovery, routes, reader
        self.gaps, self.input = gaps, feed_input
        self.checks = ResumeChecks(target_conf, ctx.source_cluster_id)
        self.tasks: dict[int, PullerTask] = {}
        # (topic, partition) of every source partition read -> its task and state: a
        # plain tuple key, as the reader's records give it, is the cheap lookup per record.
        self.route = route
        # Per task, its transactions failed in a row (the restarted task's backoff).
        self.failures: dict[int, int] = {}
        # Per task, its last failed transaction, until it commits again or is dropped.
        self.commit_errors: dict[int, str] = {}
        # Tasks are opened here, side by side (see start_tasks).
        self.opener = ThreadPoolExecutor(max_workers=8, thread_name_prefix="open-task")

    @property
    def feed_name(self) -> str:
        return self.ctx.feed.name

    def _task_partitions(self, s: int) -> set[TopicPartition]:
        n = self.ctx.feed.config.staging_partitions
        return {
            tp
            for tp in self.discovery.partitions()
            if staging_partition(tp.topic, tp.partition, n) == s
        }

    def start_tasks(self, ss: list[int]) -> dict[int, KafkaException]:
        """Start tasks ``ss`` here; returns those that could not start, and why (the
        target did not answer, or a target topic is not there yet).

        Opening a task waits on the target cluster three times: its producer's
        init_transactions (which fences any earlier owner and settles the transaction it
        left open), an aborted write that makes every mark readable
        (positions.reach_log_end), then reading the task's newest marks. About a second per
        task here, so the tasks of a handoff are opened side
        by side (a new member's arrival restarts every task of a static group), and a
        handoff of n tasks stalls the copying for about one opening, not n."""
        owned = {s: self._task_partitions(s) for s in ss}
        self.routes.prefetch(set().union(*owned.values()))
        failed: dict[int, KafkaException] = {}
        routes: dict[int, dict[TopicPartition, Route | None]] = {}
        for s in ss:
            try:
                routes[s] = self.routes.all(owned[s])
            except KafkaException as err:
                failed[s] = err
        opening = {s: self.opener.submit(self._open_task, s, routes[s]) for s in routes}
        for s, future in opening.items():
            try:
                producer, recovered = future.result()
            except KafkaException as err:
                failed[s] = err
                continue
            self._install_task(s, producer, routes[s], recovered)
        return failed

    def _open_task(
        self, s: int, routes: dict[TopicPartition, Route | None]
    ) -> tuple[Any, Marks | None]:
        """Task ``s``'s producer (its init_transactions fences any earlier owner of the
        task) and then its newest marks, once every mark written is readable, checked
        against the copies in the target (on an opener thread)."""
        producer = clients.transactional_producer(
            self.target_conf, transactional_id(self.feed_name, s), **self._producer_conf()
        )
        positions.reach_log_end(producer, self.ctx.changes_topic, s)
        marks = positions.recover_marks(self.target_conf, self.ctx.changes_topic, s, set(routes))
        return producer, self.checks.checked(s, marks, routes)

    def _install_task(
        self,
        s: int,
        producer: Any,
        routes: dict[TopicPartition, Route | None],
        recovered: Marks | None,
    ) -> None:
        """An opened task starts reading its source partitions where its marks say."""
        task = PullerTask(self.ctx, s, producer)
        task.txn.failures = self.failures.get(s, 0)
        starts: list[KafkaTP] = []
        for tp in sorted(routes):
            offset = start_offset(tp, recovered, self.ctx.feed.start)
            state = task.add_partition(tp, max(offset, 0), routes[tp])
            mark = recovered.get(tp) if recovered else None
            if mark is not None:
                state.restore(mark.resolved_ts_us, mark.watermarked)
                self.gaps.restore(state, mark.gaps)
            starts.append(KafkaTP(tp.topic, tp.partition, offset))
            self.route[(tp.topic, tp.partition)] = (task, state)
        self.tasks[s] = task
        self.input.task_started(self.ctx.feed, self.ctx.source_cluster_id)
        metrics.TASKS.labels(self.feed_name).set(len(self.tasks))
        self.reader.assign(starts)
        log.info(
            "task %d of feed %s assigned to %s: %d source partition(s), %s",
            s,
            self.feed_name,
            self.instance_id,
            len(routes),
            f"resuming from committed marks at {_positions_text(starts)}"
            if recovered
            else "fresh start",
        )

    def add_found(self, new: Iterable[TopicPartition]) -> None:
        """Source partitions discovery found: each joins its task if that runs here."""
        n = self.ctx.feed.config.staging_partitions
        by_task: dict[int, set[TopicPartition]] = {}
        for tp in new:
            s = staging_partition(tp.topic, tp.partition, n)
            task = self.tasks.get(s)
            if task is not None and tp not in task.partitions:
                by_task.setdefault(s, set()).add(tp)
        added: list[KafkaTP] = []
        self.routes.prefetch({tp for tps in by_task.values() for tp in tps})
        for s, tps in sorted(by_task.items()):
            # Not necessarily new to the feed: this instance may have started the task
            # before it saw the topic (another puller was creating its target topic), and
            # an earlier owner may have copied it already — its marks say how far.
            task = self.tasks[s]
            try:
                routes = self.routes.all(tps)
                changes = self.ctx.changes_topic
                marks = positions.recover_marks(self.target_conf, changes, s, tps)
                checked = self.checks.checked(s, marks, routes) or {}
            except KafkaException as err:
                # Its next start (membership.poll) finds every partition of the task.
                log.warning("task %d: %s; restarting the task", s, err.args[0].str())
                self.drop_task(s, commit=True)
                continue
            for tp in sorted(tps):
                mark = checked.get(tp)  # none: copy the partition from its start
                offset = OFFSET_BEGINNING if mark is None else mark.next_offset
                state = task.add_partition(tp, max(offset, 0), routes[tp])
                if mark is not None:
                    self.gaps.restore(state, mark.gaps)
                self.route[(tp.topic, tp.partition)] = (task, state)
                added.append(KafkaTP(tp.topic, tp.partition, offset))
        self.reader.assign(added)

    def _producer_conf(self) -> dict[str, Any]:
        """A task's transactional producer: copies into the target topics (mirror), or
        staging records (ordered)."""
        conf: dict[str, Any] = {
            "batch.size": 1 << 20,
            "message.max.bytes": STAGING_MAX_MESSAGE_BYTES + 2 * STAGING_HEADROOM_BYTES,
        }
        if self.ctx.ordered:
            conf.update(
                {
                    "linger.ms": 20,
                    "compression.type": self.opts.staging_compression,
                    "queue.buffering.max.kbytes": 65536,
                }
            )
        else:
            # Copies are sent as puller.copy_compression says: uncompressed by default, so
            # the target topic's compression.type decides (like MirrorMaker 2), never a
            # codec the consumers of the source did not have to read (the producer
            # default, lz4, broke faust on the target). A short linger: a transaction
            # commits ~100 ms after its first record when caught up, and the lag is what
            # users see.
            conf.update(
                {
                    "linger.ms": 10,
                    "queue.buffering.max.kbytes": 262144,
                    "compression.type": self.opts.copy_compression,
                }
            )
        return conf

    def drop_task(self, s: int, *, commit: bool) -> None:
        """Stop running task ``s`` here: its open transaction committed first if
        ``commit`` (it moves to another instance, or this one stops), else left to the
        next owner's ``init_transactions`` to abort."""
        task = self.tasks.pop(s, None)
        if task is None:
            return
        self.input.tasks_left(len(self.tasks))
        if task.pending is not None:  # a commit under way: its outcome first
            failure = task.pending.result()
            task.pending = task.pending_since = None
            if failure is None:
                task.committed()
            else:
                # Fenced, when another owner took the task while this instance was
                # paused, or the target failed: nothing more to commit.
                log.warning("task %d: its last transaction failed: %s", s, failure.detail)
                task.failed(failure)
                commit = False
        if commit:
            failure = task.commit(*self.reader.positions(list(task.partitions)), self.known_until())
            if failure is not None:
                log.warning(
                    "task %d: final commit failed (%s); the next owner redoes it",
                    s,
                    failure.detail,
                )
                task.failed(failure)
        owned = [key for key, (t, _) in self.route.items() if t is task]
        for key in owned:
            del self.route[key]
        unread = self.gaps.release(set(task.partitions))
        self.reader.unassign(
            TopicPartition(t, p) for t, p in owned if TopicPartition(t, p) not in unread
        )
        task.close()
        metrics.TASKS.labels(self.feed_name).set(len(self.tasks))
        log.info("task %d of feed %s released by %s", s, self.feed_name, self.instance_id)

    def known_until(self) -> int | None:
        """Ordered feeds: when the source's topics were last listed (a resolved_ts never
        passes it; Discovery.listed_at_us). None for mirror feeds: their marks order
        nothing across partitions, so a topic found late is never behind them."""
        if not self.ctx.ordered:
            return None
        return self.discovery.listed_at_us


def _positions_text(starts: list[KafkaTP], most: int = 8) -> str:
    """Where a task resumes, for its log line (what an exactly-once question asks first)."""
    shown = ", ".join(f"{tp.topic}/{tp.partition}@{tp.offset}" for tp in starts[:most])
    return shown + (f" and {len(starts) - most} more" if len(starts) > most else "")
