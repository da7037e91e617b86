"""A puller instance: runs the tasks its membership gives it (see membership.py).

Tasks are numbered like the partitions of ``_crossfeed.<feed>.changes`` (which hold their
positions). One source consumer per instance reads every source partition of the
instance's tasks; each record goes to its task's open transaction (task.py). The instance
heartbeats to ``_crossfeed.heartbeats`` with its tasks, each source partition's
resolved_ts and, for a mirror feed, its checkpoint_ts (what is committed in the target).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed import positions
from crossfeed.cdc.schema_copy import SchemaFollower
from crossfeed.config import Settings
from crossfeed.core import gaps, topic_configs
from crossfeed.core.partitions import TopicPartition, staging_partition
from crossfeed.core.resume import resume_offset
from crossfeed.core.task_txn import Next, Outcome
from crossfeed.core.timestamps import commit_interval_ms
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.kafka.reachability import Reachability, wait_for_cluster
from crossfeed.kafka.targets import TargetTopics
from crossfeed.membership import HeartbeatContent, HeartbeatSender, ensure_control_topics
from crossfeed.services.puller import metrics
from crossfeed.services.puller.copies import Route
from crossfeed.services.puller.debezium_reader import DebeziumReader
from crossfeed.services.puller.discovery import Discovery
from crossfeed.services.puller.membership import CoordinatorMembership, GroupMembership
from crossfeed.services.puller.task import (
    FeedContext,
    PartitionState,
    PullerTask,
    TxnFailure,
    transactional_id,
)
from crossfeed.wire import ids, topics

log = logging.getLogger(__name__)

CONSUME_BATCH = 5000  # records per consume call
READ_WAIT_S = 0.05  # longest a consume call waits for source records
SOURCE_UP_WINDOW_S = 3.0  # statistics arrive every second; allow for two missing
STUCK_COMMIT_S = 5.0  # a commit under way this long: the target is not answering
WAITING_REFRESH_S = 0.5  # topic listing again while a new target topic does not answer
# An ordered feed's topic listing: no resolved_ts passes the last one (Discovery.listed_at_us),
# so this is also how far behind the clock an idle feed's resolved_ts may stay.
ORDERED_REFRESH_S = 0.5
STAGING_MAX_MESSAGE_BYTES = topics.STAGING_MAX_MESSAGE_BYTES
STAGING_HEADROOM_BYTES = topics.STAGING_HEADROOM_BYTES


class PullerWorker:
    def __init__(
        self,
        settings: Settings,
        feed: FeedSpec,
        instance_id: str,
        membership: GroupMembership | CoordinatorMembership,
        control_conf: dict[str, Any],
    ) -> None:
        self.settings = settings
        self.feed = feed
        self.instance_id = instance_id
        # Where the puller writes: the Kafka target, or for a database feed the control
        # cluster (the feed's internal topics live there).
        target_alias = self.target_alias = settings.staging_alias(feed.sink.cluster)
        self.source_conf = settings.cluster(feed.source).client_config()
        self.target_conf = settings.cluster(target_alias).client_config()
        self.changes_topic = topics.changes(feed.name)
        self.tasks: dict[int, PullerTask] = {}
        # (topic, partition) of every source partition read -> its task and state: a
        # plain tuple key, as the reader's records give it, is the cheap lookup per record.
        self.route: dict[tuple[str, int], tuple[PullerTask, PartitionState]] = {}
        self.ctx: FeedContext | None = None
        self.discovery: Discovery | None = None
        self.targets: TargetTopics | None = None  # mirror feeds: facts of the target topics
        # Mirror partitions whose target partition has another writer: a delivery report
        # per copy from now on (copies.Block).
        self.exact: set[TopicPartition] = set()
        # Per task, its transactions failed in a row (the restarted task's backoff).
        self.failures: dict[int, int] = {}
        self.reader: Any = None
        self.membership = membership
        self.control_conf = control_conf
        self.heartbeats: HeartbeatSender | None = None
        self.address = ""
        self.source = Reachability("source", feed.source, self.source_conf)
        # Why the start waits (a cluster that does not answer, or refuses us): /status.
        self.start_problem: str | None = None
        # Per task, its last failed transaction, until it commits again or is dropped.
        self.commit_errors: dict[int, str] = {}
        # Commits run here, overlapping with reading (see PullerTask): one thread per task
        # of a typical instance, as a commit mostly waits on the broker.
        self.committer = ThreadPoolExecutor(max_workers=8, thread_name_prefix="commit")
        # Tasks are opened here, side by side (see start_tasks).
        self.opener = ThreadPoolExecutor(max_workers=8, thread_name_prefix="open-task")
        self.last_refresh = 0.0
        self.last_config_sync = 0.0
        # How long a transaction may stay open (commit_interval_ms; each read sets it).
        self.interval_s = settings.puller.commit_interval_ms / 1000
        self.last_metrics = 0.0
        # Gaps reported and not acknowledged, by key (core/gaps.py; also carried in the
        # marks of their partitions, so a restart or a new owner reports them again), and
        # the partitions among them not read until they are (gap.policy=stop); partitions
        # whose position is past the source's end (never read again by this instance,
        # never copied twice).
        self.gaps: dict[str, gaps.Gap] = {}
        self.waiting_gaps: set[TopicPartition] = set()
        self.beyond_end: dict[TopicPartition, str] = {}
        # Debezium input: its reader runs where the feed's one task runs (debezium_reader.py).
        self.debezium_reader: DebeziumReader | None = None

    # -- lifecycle ------------------------------------------------------------------

    def start(self, stop: threading.Event) -> None:
        source_id = wait_for_cluster(self.feed.source, self.source_conf, stop, self._at_start)
        target_id = wait_for_cluster(self.target_alias, self.target_conf, stop, self._at_start)
        opts = self.settings.puller
        target_admin = clients.admin(self.target_conf)
        staging_max = STAGING_MAX_MESSAGE_BYTES + STAGING_HEADROOM_BYTES
        created = kafka_topics.ensure_internal(
            target_admin, self.changes_topic, self.feed.config.staging_partitions
        )
        if not created:
            staging_max = self._staging_limit(target_admin, staging_max)
        self.ctx = FeedContext(
            feed=self.feed,
            source_cluster_id=source_id,
            target_cluster_id=target_id,
            changes_topic=self.changes_topic,
            max_batch_records=opts.max_batch_records,
            max_batch_bytes=opts.max_batch_bytes,
            pack_bytes=opts.pack_bytes,
            commit_interval_s=opts.commit_interval_ms / 1000,
            backlog_commit_interval_s=opts.backlog_commit_interval_ms / 1000,
            resolved_interval_s=opts.resolved_interval_ms / 1000,
            staging_max_bytes=staging_max,
            schemas_topic=topics.schemas(self.feed.name) if self.feed.input == "debezium" else None,
            follower=self._follower(),
        )
        kafka_topics.ensure_internal(target_admin, topics.DLQ)
        if self.feed.mode == "mirror":
            kafka_topics.ensure_internal(target_admin, topics.OFFSET_SYNCS)
        self.targets = TargetTopics(target_admin)
        if self.ctx.schemas_topic is not None:
            kafka_topics.ensure_internal(target_admin, self.ctx.schemas_topic)
        if self.feed.input == "debezium":  # the task reads it from the start
            kafka_topics.ensure_internal(
                clients.admin(self.source_conf), topics.debezium_ordered(self.feed.name)
            )
        self.discovery = Discovery(
            self.feed,
            clients.admin(self.source_conf),
            target_admin,
            excluded=topic_configs.Excluded.parse(opts.config_sync_exclude),
        )
        self.discovery.refresh()
        self.last_refresh = time.monotonic()
        self._count_gaps()  # 0 until a gap is reported, or carried by a task's marks
        self.reader = clients.consumer(
            self.source_conf,
            **{
                "group.id": ids.puller_group(self.feed.name),  # never joined: assign only
                "queued.max.messages.kbytes": 32768,  # bounded prefetch
                "fetch.wait.max.ms": 100,
                # librdkafka's default (1 MiB per partition per fetch) held one reader to
                # ~100k records/s of 1 KiB with this prefetch bound; 8 MiB: ~600k.
                "max.partition.fetch.bytes": 8 << 20,
                # A position below the log start (records deleted before they were
                # copied) is an error to report, never a silent jump (_out_of_range).
                "auto.offset.reset": "error",
                # Broker states once a second: is the source reachable at all?
                **self.source.client_conf(),
            },
        )
        ensure_control_topics(self.control_conf)
        self.membership.start(self)
        self.heartbeats = HeartbeatSender(
            self.control_conf, self.instance_id, "puller", self._heartbeat
        ).start()
        # What this puller writes: the target topics, or an ordered feed's staging topic
        # (on the control cluster for a feed into a database, which has no target cluster).
        writes = self.target_alias
        if self.feed.mode == "ordered":
            writes = f"{topics.changes(self.feed.name)} on {self.target_alias}"
        log.info(
            "puller %s started for feed %s (%s -> %s)",
            self.instance_id,
            self.feed.name,
            self.feed.source,
            writes,
        )

    def _follower(self) -> SchemaFollower | None:
        """Mirror feeds whose records' schemas follow them (schema.registry.target_url)."""
        opts = self.feed.config
        if not (opts.schema_registry_target_url and opts.schema_registry_url):
            return None  # FeedSpec checks they come together, for mirror feeds only
        return SchemaFollower(opts.schema_registry_url, opts.schema_registry_target_url)

    def _staging_limit(self, admin: Any, default: int) -> int:
        """The max.message.bytes of an existing staging topic: an older one may allow less,
        and a record that would not fit is a dead letter (a staging record the broker
        refuses would fail every transaction)."""
        try:
            configured = kafka_topics.config_value(admin, self.changes_topic, "max.message.bytes")
        except KafkaException as err:
            log.warning("cannot read max.message.bytes of %s (%s)", self.changes_topic, err)
            return default
        if configured and configured.isdigit():
            return min(default, int(configured))
        return default

    def run(self, stop: threading.Event) -> None:
        """Copy until ``stop`` is set; raises FeedStopped on errors.tolerance=none."""
        self.start(stop)
        try:
            while not stop.is_set():
                self.step()
        finally:
            self.shutdown()

    def step(self) -> None:
        assert self.ctx is not None and self.discovery is not None
        self.membership.poll()  # tasks start and stop here, on this thread
        updated = self.membership.newer_spec()
        if updated is not None and updated.model_dump() != self.feed.model_dump():
            self._apply_update(updated)
        now = time.monotonic()
        interval = self.settings.puller.topic_refresh_s
        if self.discovery.waiting:  # a target topic not answering yet: look again soon
            interval = min(interval, WAITING_REFRESH_S)
        if self.feed.mode == "ordered":  # its resolved_ts waits for the listing: keep it fresh
            interval = min(interval, ORDERED_REFRESH_S)
        if now - self.last_refresh >= interval:
            self._refresh()
            self.last_refresh = now
        sync_every = self.settings.puller.config_sync_interval_s
        if sync_every and now - self.last_config_sync >= sync_every:
            self._sync_configs()
            self.last_config_sync = now
        if not self.tasks:
            time.sleep(0.05)
            return
        self._settle()
        for task in list(self.tasks.values()):
            if task.overfull():  # its commit is slow: wait rather than buffer without end
                self._settle_task(task)
        batch = self.reader.consume(CONSUME_BATCH, timeout=self._read_wait())
        self.source.polled()
        # Catching up a backlog: fewer, larger transactions (see commit_interval_ms).
        self.interval_s = interval_s = (
            commit_interval_ms(
                len(batch) >= CONSUME_BATCH,
                batch[-1].timestamp()[1] if batch else -1,
                time.time() * 1000,
                self.ctx.commit_interval_s * 1000,
                self.ctx.backlog_commit_interval_s * 1000,
            )
            / 1000
        )
        route = self.route.get  # the hot loop: a record at a time
        now = time.monotonic()
        for msg in batch:
            if msg.error():
                if msg.error().code() == KafkaError._AUTO_OFFSET_RESET:
                    self._out_of_range(msg.topic(), msg.partition(), msg.offset())
                elif not msg.error().retriable():
                    log.warning("source read error: %s", msg.error())
                continue
            found = route((msg.topic(), msg.partition()))
            if found is not None:
                found[0].add(msg, found[1], now)
        for task in list(self.tasks.values()):
            failure = task.send()
            if failure is not None:
                self._commit_failed(task, failure)
        now = time.monotonic()
        due = [task for task in self.tasks.values() if task.due(now, interval_s)]
        if due:
            self._commit_all(due)
        if now - self.last_metrics >= 1.0:
            self._update_lag()
            self.last_metrics = now

    def _apply_update(self, feed: FeedSpec) -> None:
        """A feed updated while running (PUT /v1/changefeeds): new topics are picked up
        at once; tasks started from now on use the new selection, rename format and
        options; a running task keeps what it started with until it restarts
        (``crossfeed changefeed restart``). Source, target, mode, start and the number of
        tasks never change (services/coordinator/updates.py)."""
        assert self.ctx is not None and self.discovery is not None
        self.feed = feed
        self.ctx = dataclasses.replace(self.ctx, feed=feed)
        self.discovery.retarget(feed)
        self.last_refresh = 0.0  # look at the topics now
        self._apply_acks()
        log.info(
            "feed %s updated: topics %s%s, rename format %s; running tasks keep the old "
            "definition until they restart",
            feed.name,
            feed.topics,
            f" excluding {feed.exclude}" if feed.exclude else "",
            feed.rename_format,
        )

    def _read_wait(self) -> float:
        """How long the next read may wait: librdkafka's consume waits out its whole
        timeout unless the batch fills (5,000 records take 125 ms at 40k/s), and a commit
        due meanwhile would be that late."""
        now = time.monotonic()
        waits = (task.due_in(now, self.interval_s) for task in self.tasks.values())
        return min([READ_WAIT_S, *(max(0.0, w) for w in waits if w is not None)])

    def shutdown(self) -> None:
        """Commit what is open and leave the group, so others take the tasks at once."""
        for s in list(self.tasks):
            self.drop_task(s, commit=True)
        self.membership.close()
        if self.heartbeats is not None:
            self.heartbeats.leave()
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        log.info("puller %s stopped", self.instance_id)

    # -- tasks ----------------------------------------------------------------------

    def _task_partitions(self, s: int) -> set[TopicPartition]:
        assert self.discovery is not None
        n = self.feed.config.staging_partitions
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
        assert self.ctx is not None
        owned = {s: self._task_partitions(s) for s in ss}
        self._prefetch_targets(set().union(*owned.values()))
        failed: dict[int, KafkaException] = {}
        routes: dict[int, dict[TopicPartition, Route | None]] = {}
        for s in ss:
            try:
                routes[s] = {tp: self._route(tp) for tp in owned[s]}
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
    ) -> tuple[Any, dict[TopicPartition, positions.Recovered] | None]:
        """Task ``s``'s producer (its init_transactions fences any earlier owner of the
        task) and then its newest marks, once every mark written is readable, checked
        against the copies in the target (on an opener thread)."""
        producer = clients.transactional_producer(
            self.target_conf, transactional_id(self.feed.name, s), **self._producer_conf()
        )
        positions.reach_log_end(producer, self.changes_topic, s)
        marks = positions.recover_marks(self.target_conf, self.changes_topic, s, set(routes))
        return producer, self._checked(s, marks, routes)

    def _checked(
        self,
        s: int,
        marks: dict[TopicPartition, positions.Recovered] | None,
        routes: dict[TopicPartition, Route | None],
    ) -> dict[TopicPartition, positions.Recovered] | None:
        """A mirror task's marks, corrected where its copies in the target say otherwise
        (crossfeed/core/resume.py: a transaction once committed on the changes partition
        and not on a target partition)."""
        if not marks:
            return marks
        copies = {
            tp: (route.target_topic, route.partition)
            for tp, route in routes.items()
            if route is not None and tp in marks
        }
        if not copies:
            return marks
        assert self.ctx is not None
        tails = positions.copies_in_tail(self.target_conf, copies, self.ctx.source_cluster_id)
        checked = dict(marks)
        for tp, tail in tails.items():
            mark = marks[tp]
            offset = resume_offset(mark.next_offset, tail.committed, tail.aborted)
            if offset != mark.next_offset:
                log.warning(
                    "task %d: %s/%d: the marks say %d, the copies in %s/%d say %d "
                    "(newest committed copy %s, %d aborted); resuming at %d",
                    s,
                    tp.topic,
                    tp.partition,
                    mark.next_offset,
                    *copies[tp],
                    offset,
                    tail.committed,
                    len(tail.aborted),
                    offset,
                )
                checked[tp] = mark._replace(next_offset=offset)
        return checked

    def _install_task(
        self,
        s: int,
        producer: Any,
        routes: dict[TopicPartition, Route | None],
        recovered: dict[TopicPartition, positions.Recovered] | None,
    ) -> None:
        """An opened task starts reading its source partitions where its marks say."""
        assert self.ctx is not None
        task = PullerTask(self.ctx, s, producer)
        task.txn.failures = self.failures.get(s, 0)
        starts: list[KafkaTP] = []
        for tp in sorted(routes):
            offset = self._start_offset(tp, recovered)
            state = task.add_partition(tp, max(offset, 0), routes[tp])
            mark = recovered.get(tp) if recovered else None
            if mark is not None:
                state.restore(mark.resolved_ts_us, mark.watermarked)
                self._restore_gaps(state, mark.gaps)
            starts.append(KafkaTP(tp.topic, tp.partition, offset))
            self.route[(tp.topic, tp.partition)] = (task, state)
        self.tasks[s] = task
        if self.feed.input == "debezium" and self.debezium_reader is None:
            self.debezium_reader = DebeziumReader(
                self.feed, self.source_conf, self.ctx.source_cluster_id
            )
            self.debezium_reader.start()
        metrics.TASKS.labels(self.feed.name).set(len(self.tasks))
        if starts:
            self.reader.incremental_assign(starts)
        log.info(
            "task %d of feed %s assigned to %s: %d source partition(s), %s",
            s,
            self.feed.name,
            self.instance_id,
            len(routes),
            f"resuming from committed marks at {_positions_text(starts)}"
            if recovered
            else "fresh start",
        )

    def _producer_conf(self) -> dict[str, Any]:
        """A task's transactional producer: copies into the target topics (mirror), or
        staging records (ordered)."""
        conf: dict[str, Any] = {
            "batch.size": 1 << 20,
            "message.max.bytes": STAGING_MAX_MESSAGE_BYTES + 2 * STAGING_HEADROOM_BYTES,
        }
        if self.ctx is not None and self.ctx.ordered:
            conf.update(
                {
                    "linger.ms": 20,
                    "compression.type": self.settings.puller.staging_compression,
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
                    "compression.type": self.settings.puller.copy_compression,
                }
            )
        return conf

    def _prefetch_targets(self, tps: Iterable[TopicPartition]) -> None:
        """The target topics' facts that :meth:`_route` needs, asked for all at once
        (best effort: what is not learnt here, _route asks for itself)."""
        if self.ctx is None or self.ctx.ordered or self.targets is None:
            return
        try:
            self.targets.prefetch({self.feed.target_topic(tp.topic) for tp in tps})
        except KafkaException as err:
            log.debug("target topics not prefetched: %s", err)

    def _route(self, tp: TopicPartition) -> Route | None:
        """Where a mirror feed's source partition is copied to (None: an ordered feed);
        KafkaException while the target topic is not there or too small (the task is
        started again later; discovery creates and checks target topics)."""
        if self.ctx is None or self.ctx.ordered:
            return None
        assert self.targets is not None
        name = self.feed.target_topic(tp.topic)
        target = self.targets.get(name, tp.partition)
        if target is None or tp.partition >= target.partitions:
            raise KafkaException(
                KafkaError(
                    KafkaError.UNKNOWN_TOPIC_OR_PART,
                    f"target partition {name}/{tp.partition} for {tp} does not exist (yet) on "
                    f"{self.target_alias}",
                )
            )
        return Route(name, tp.partition, target.max_message_bytes, exact=tp in self.exact)

    def _start_offset(
        self, tp: TopicPartition, recovered: dict[TopicPartition, positions.Recovered] | None
    ) -> int:
        if recovered is None:  # the task never committed: the feed's start position
            return OFFSET_END if self.feed.start == "latest" else OFFSET_BEGINNING
        # A partition missing from the marks appeared after the last commit: copy all of it.
        mark = recovered.get(tp)
        return OFFSET_BEGINNING if mark is None else mark.next_offset

    def drop_task(self, s: int, *, commit: bool) -> None:
        """Stop running task ``s`` here: its open transaction committed first if
        ``commit`` (it moves to another instance, or this one stops), else left to the
        next owner's ``init_transactions`` to abort."""
        task = self.tasks.pop(s, None)
        if task is None:
            return
        if self.debezium_reader is not None and not self.tasks:
            self.debezium_reader.stop()  # the new owner of the task runs it now
            self.debezium_reader = None
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
            failure = task.commit(*self._positions(task), self._known_until())
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
        # Partitions waiting on a gap, or past the source's end, were unassigned then (and
        # the next owner finds them again where they stand).
        unread = set(task.partitions) & (self.waiting_gaps | set(self.beyond_end))
        for tp in task.partitions:
            self.waiting_gaps.discard(tp)
            self.beyond_end.pop(tp, None)
        # The next owner reports them from the marks.
        self.gaps = {k: g for k, g in self.gaps.items() if g.tp not in task.partitions}
        self._count_gaps()
        assigned = [KafkaTP(t, p) for t, p in owned if TopicPartition(t, p) not in unread]
        if assigned and self.reader is not None:
            self.reader.incremental_unassign(assigned)
        task.close()
        metrics.TASKS.labels(self.feed.name).set(len(self.tasks))
        log.info("task %d of feed %s released by %s", s, self.feed.name, self.instance_id)

    def _known_until(self) -> int | None:
        """Ordered feeds: when the source's topics were last listed (a resolved_ts never
        passes it; Discovery.listed_at_us). None for mirror feeds: their marks order
        nothing across partitions, so a topic found late is never behind them."""
        if self.feed.mode != "ordered" or self.discovery is None:
            return None
        return self.discovery.listed_at_us

    def _positions(self, task: PullerTask) -> tuple[dict[TopicPartition, int], set[TopicPartition]]:
        """The reader's positions for the task's partitions, and which ones are caught up."""
        tps = list(task.partitions)
        kafka_tps = [KafkaTP(tp.topic, tp.partition) for tp in tps]
        fetched = self.reader.position(kafka_tps) if kafka_tps else []
        positions_now = {tp: kp.offset for tp, kp in zip(tps, fetched, strict=True)}
        caught_up = set()
        # A partition is caught up only if the source answers now: its cached high
        # watermark says nothing about records written while it is out of reach.
        source_up = self.source.up(SOURCE_UP_WINDOW_S)
        for tp, kp in zip(tps, kafka_tps, strict=True):
            if not source_up:
                break
            _, high = self.reader.get_watermark_offsets(kp, cached=True)
            if high >= 0 and positions_now[tp] >= high:
                caught_up.add(tp)
        return positions_now, caught_up

    def _commit_all(self, due: list[PullerTask]) -> None:
        """Seal the due tasks' transactions here and commit them on the committer threads
        (each task has its own producer; a commit mostly waits on the broker), while this
        thread goes on reading; :meth:`_settle` picks up the outcomes."""
        for task in due:
            follower = self.ctx.follower if self.ctx is not None else None
            if follower is not None and task.schema_ids:
                problem = follower.ensure(task.schema_ids)
                if problem is not None:  # never a record on the target without its schema
                    self._commit_failed(task, TxnFailure(Outcome.FAILED, problem))
                    continue
                task.schema_ids.clear()
            failure = task.seal(*self._positions(task), self._known_until())
            if failure is not None:
                self._commit_failed(task, failure)
                continue
            task.pending = self.committer.submit(task.finish)
            task.pending_since = time.monotonic()

    def _settle(self) -> None:
        """Bookkeeping for the commits that have finished."""
        for task in list(self.tasks.values()):
            if task.pending is not None and task.pending.done():
                self._settle_task(task)

    def _settle_task(self, task: PullerTask) -> None:
        assert task.pending is not None
        failure = task.pending.result()  # waits for the commit
        task.pending = task.pending_since = None
        if failure is None:
            task.committed()
            self.commit_errors.pop(task.staging_partition, None)
            self.failures.pop(task.staging_partition, None)
        else:
            self._commit_failed(task, failure)

    def _commit_failed(self, task: PullerTask, failure: TxnFailure) -> None:
        """A transaction of ``task`` failed: the task ends here (core/task_txn.py,
        invariant C). Fenced — another owner runs it — it is just dropped; otherwise it
        is started again (membership.poll) after the decision's backoff, with a new
        producer, from its marks on the target."""
        s = task.staging_partition
        decision = task.failed(failure)
        self.exact |= {
            tp for tp, state in task.partitions.items() if state.route and state.route.exact
        }
        if decision.next is Next.DROP:
            log.warning("%s", failure.detail)
        else:
            metrics.FAILED_TRANSACTIONS.labels(self.feed.name).inc()
            self.failures[s] = task.txn.failures
            self.commit_errors[s] = f"task {s}: {decision.reason}"
            log.warning("task %d: %s", s, decision.reason)
            if decision.backoff_s:
                self.membership.retry_at = max(
                    self.membership.retry_at, time.monotonic() + decision.backoff_s
                )
        self.drop_task(s, commit=False)

    def _refresh(self) -> None:
        assert self.discovery is not None
        try:
            new = self.discovery.refresh()
        except KafkaException as err:
            log.warning("topic discovery failed: %s", err)
            return
        metrics.FEED_ERROR.labels(self.feed.name).set(1 if self.discovery.errors else 0)
        n = self.feed.config.staging_partitions
        by_task: dict[int, set[TopicPartition]] = {}
        for tp in new:
            s = staging_partition(tp.topic, tp.partition, n)
            task = self.tasks.get(s)
            if task is not None and tp not in task.partitions:
                by_task.setdefault(s, set()).add(tp)
        added: list[KafkaTP] = []
        self._prefetch_targets({tp for tps in by_task.values() for tp in tps})
        for s, tps in sorted(by_task.items()):
            # Not necessarily new to the feed: this instance may have started the task
            # before it saw the topic (another puller was creating its target topic), and
            # an earlier owner may have copied it already — its marks say how far.
            task = self.tasks[s]
            try:
                routes = {tp: self._route(tp) for tp in tps}
                marks = positions.recover_marks(self.target_conf, self.changes_topic, s, tps)
                checked = self._checked(s, marks, routes) or {}
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
                    self._restore_gaps(state, mark.gaps)
                self.route[(tp.topic, tp.partition)] = (task, state)
                added.append(KafkaTP(tp.topic, tp.partition, offset))
        if added:
            self.reader.incremental_assign(added)

    # -- gaps -------------------------------------------------------------------------

    def _out_of_range(self, topic: str, partition: int, offset: int) -> None:
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
            low, high = self.reader.get_watermark_offsets(
                KafkaTP(topic, partition), timeout=10, cached=False
            )
        except KafkaException as err:
            log.warning(
                "%s: out of range at %d, log not known (%s); reading again", tp, offset, err
            )
            self._reassign(tp, position)
            return
        where = gaps.classify(position, low, high)
        if where is gaps.Position.READABLE:
            log.info(
                "%s: offset %d is in the log again (%d-%d): reading there", tp, position, low, high
            )
            self._reassign(tp, position)
        elif where is gaps.Position.BEYOND_END:
            self.beyond_end[tp] = (
                f"{tp}: the next offset to copy, {position}, is past the source's log end "
                f"{high} (the source lost records it had served: an unclean leader election, a "
                f"topic deleted and created again?); not copied until its task restarts"
            )
            log.error("feed %s: %s", self.feed.name, self.beyond_end[tp])
            self.reader.incremental_unassign([KafkaTP(topic, partition)])
        else:
            self._gap(task, state, gaps.gap_at(tp, position, low))

    def _gap(self, task: PullerTask, state: PartitionState, gap: gaps.Gap) -> None:
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
            self.waiting_gaps.add(gap.tp)
            self.reader.incremental_unassign([KafkaTP(gap.tp.topic, gap.tp.partition)])
        self._count_gaps()

    def _restore_gaps(self, state: PartitionState, text: str) -> None:
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
        self._count_gaps()

    def _count_gaps(self) -> None:
        metrics.WAITING_GAPS.labels(self.feed.name).set(len(self.waiting_gaps))
        metrics.UNACKNOWLEDGED_GAPS.labels(self.feed.name).set(len(self.gaps))

    def _skip(
        self, task: PullerTask, state: PartitionState, gap: gaps.Gap, *, assigned: bool = True
    ) -> None:
        """Go on after ``gap``: its dead letter and the partition's position past it in
        the next transaction, the reader at the log start (``assigned``: the reader still
        has the partition, in librdkafka's error state)."""
        task.gap_letter(state, gap)
        self._reassign(gap.tp, gap.end, assigned=assigned)

    def _reassign(self, tp: TopicPartition, offset: int, *, assigned: bool = True) -> None:
        """Read ``tp`` from ``offset`` (a partition in librdkafka's error state takes no
        seek: it is assigned afresh)."""
        if assigned:
            self.reader.incremental_unassign([KafkaTP(tp.topic, tp.partition)])
        self.reader.incremental_assign([KafkaTP(tp.topic, tp.partition, offset)])

    def _apply_acks(self) -> None:
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
            if tp not in self.waiting_gaps or found is None:
                continue
            self.waiting_gaps.discard(tp)
            task, state = found
            try:
                low, _ = self.reader.get_watermark_offsets(
                    KafkaTP(tp.topic, tp.partition), timeout=10, cached=False
                )
            except KafkaException as err:
                log.warning("%s: log start not known (%s); trying from the gap's end", tp, err)
                low = gap.end
            if low > gap.end:
                metrics.GAP_RECORDS.labels(*state.labels).inc(low - gap.end)
                gap = gaps.Gap(tp, gap.first, low)
            self._skip(task, state, gap, assigned=False)  # unassigned while it waited
        self._count_gaps()

    def _sync_configs(self) -> None:
        assert self.discovery is not None
        try:
            self.discovery.sync_configs()
            if self.settings.puller.acl_sync:
                self.discovery.sync_acls()
        except KafkaException as err:
            log.warning("topic config or ACL sync failed: %s", err)

    def _update_lag(self) -> None:
        now_us = time.time() * 1_000_000
        for (topic, partition), (task, state) in self.route.items():
            kp = KafkaTP(topic, partition)
            _, high = self.reader.get_watermark_offsets(kp, cached=True)
            if high < 0:
                continue
            taken = task.position(state.tp)
            lag = max(0, high - max(taken, self.reader.position([kp])[0].offset))
            metrics.LAG_RECORDS.labels(*state.labels).set(lag)
            age = (now_us - state.last_ts_us) / 1e6 if lag and state.last_ts_us else 0.0
            metrics.LAG_SECONDS.labels(*state.labels).set(max(age, 0.0))

    # -- status ---------------------------------------------------------------------

    def _heartbeat(self) -> HeartbeatContent:
        tasks = list(self.tasks.items())
        resolved: dict[str, int] = {}
        for _, task in tasks:
            for tp, state in list(task.partitions.items()):
                resolved[str(tp)] = state.resolved_ts_us
        return HeartbeatContent(
            tasks=[f"{self.feed.name}/puller/{s}" for s, _ in tasks],
            feeds=[self.feed.name],
            address=self.address,
            resolved=resolved,
            # A mirror feed's marks commit with its copies in the target: its resolved_ts
            # as of the last commit is the partition's checkpoint_ts.
            checkpoints={} if self.feed.mode == "ordered" else dict(resolved),
            last_error=self._problem() or "",
            notices=self._notices(),
        )

    def _at_start(self, problem: str | None) -> None:
        self.start_problem = problem

    def _notices(self) -> list[str]:
        """What the operator must hear about though the feed is not in error: the gaps
        not acknowledged (a feed in error for coordinator.error_stuck_s is stopped whole,
        and a gap stops at most its own partition), configs a target topic refuses,
        source topics deleted."""
        policy = self.feed.config.gap_policy
        gap_lines = [g.describe(self.feed.name, policy) for g in sorted(list(self.gaps.values()))]
        return gap_lines + (self.discovery.notices() if self.discovery is not None else [])

    def _problem(self) -> str | None:
        """Why the instance makes no progress now, if it knows (heartbeat's last_error)."""
        if self.discovery is None:
            return self.start_problem
        stuck = [
            s
            for s, task in list(self.tasks.items())
            if task.pending_since is not None
            and time.monotonic() - task.pending_since >= STUCK_COMMIT_S
        ]
        target = (
            f"target cluster {self.target_alias} ({self.target_conf.get('bootstrap.servers')})"
            f" not answering: commit of task(s) {stuck} under way for {STUCK_COMMIT_S:.0f}s+"
            if stuck
            else None
        )
        problems = [
            *(self.beyond_end[tp] for tp in sorted(list(self.beyond_end))),
            self.discovery.last_error,
            self.source.problem(),
            target,
            *(self.commit_errors.get(s) for s in list(self.tasks)),
        ]
        return "; ".join(p for p in problems if p) or None

    def status(self) -> dict[str, Any]:
        discovery = self.discovery
        problem = self._problem()
        reader = self.debezium_reader.status() if self.debezium_reader is not None else None
        if problem is None and reader is not None and reader["problem"]:
            problem = f"debezium reader: {reader['problem']}"
        answer: dict[str, Any] = {
            "role": "puller",
            "instance": self.instance_id,
            "feed": self.feed.name,
            "state": "error" if problem else ("normal" if discovery else "starting"),
            "last_error": problem,
            "notices": self._notices(),
            "tasks": sorted(self.tasks),
            "partitions": {
                str(state.tp): {
                    "next_offset": task.position(state.tp),
                    "resolved_ts_us": state.resolved_ts_us,
                    "watermarked": state.watermarked,
                }
                for task, state in sorted(self.route.values(), key=lambda found: found[1].tp)
            },
        }
        answer["gaps"] = [
            {
                "partition": str(gap.tp),
                "first": gap.first,
                "last": gap.last,
                "count": gap.count,
                "key": gap.key,
                "waiting": gap.tp in self.waiting_gaps,
            }
            for gap in sorted(list(self.gaps.values()))
        ]
        if reader is not None:
            answer["debezium_reader"] = reader
        return answer


def _positions_text(starts: list[KafkaTP], most: int = 8) -> str:
    """Where a task resumes, for its log line (what an exactly-once question asks first)."""
    shown = ", ".join(f"{tp.topic}/{tp.partition}@{tp.offset}" for tp in starts[:most])
    return shown + (f" and {len(starts) - most} more" if len(starts) > most else "")
