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
from typing import Any

from confluent_kafka import KafkaException

from crossfeed.cdc.schema_copy import SchemaFollower
from crossfeed.config import Settings
from crossfeed.config.settings import PullerSettings
from crossfeed.core import topic_configs
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.kafka.reachability import Reachability, wait_for_cluster
from crossfeed.kafka.targets import TargetTopics
from crossfeed.membership import HeartbeatContent, HeartbeatSender, ensure_control_topics
from crossfeed.services.puller import metrics
from crossfeed.services.puller.copy_loop import CopyLoop
from crossfeed.services.puller.discovery import Discovery
from crossfeed.services.puller.inputs import input_for
from crossfeed.services.puller.membership import CoordinatorMembership, GroupMembership
from crossfeed.services.puller.routes import Routes
from crossfeed.services.puller.source_gaps import RouteMap, SourceGaps
from crossfeed.services.puller.source_reader import SourceReader
from crossfeed.services.puller.target_sync import TargetSync
from crossfeed.services.puller.task import PullerTask
from crossfeed.services.puller.task_state import FeedContext
from crossfeed.services.puller.tasks import TaskSet
from crossfeed.wire import topics

log = logging.getLogger(__name__)

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
        self.membership = membership
        self.control_conf = control_conf
        self.heartbeats: HeartbeatSender | None = None
        self.address = ""
        self.source = Reachability("source", feed.source, self.source_conf)
        # Why the start waits (a cluster that does not answer, or refuses us): /status.
        self.start_problem: str | None = None
        self.last_refresh = 0.0
        self.last_config_sync = 0.0
        self.input = input_for(feed, self.source_conf)  # what differs for Debezium input
        self.reader = SourceReader(self.source_conf, self.source)
        self.routes = Routes(feed, target_alias)
        self.route: RouteMap = {}  # filled by the tasks (TaskSet.route)
        self.gaps = SourceGaps(feed, self.reader, self.route)
        # Once started: the topics found, the tasks run here and their copying.
        self.discovery: Discovery | None = None
        self.target_sync: TargetSync | None = None
        self.taskset: TaskSet | None = None
        self.loop: CopyLoop | None = None

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
            staging_max = _staging_limit(target_admin, self.changes_topic, staging_max)
        ctx = _feed_context(
            opts, self.feed, (source_id, target_id), staging_max, self.input.schemas_topic()
        )
        kafka_topics.ensure_internal(target_admin, topics.DLQ)
        if self.feed.mode == "mirror":
            kafka_topics.ensure_internal(target_admin, topics.OFFSET_SYNCS)
        self.routes.targets = TargetTopics(target_admin)
        if ctx.schemas_topic is not None:
            kafka_topics.ensure_internal(target_admin, ctx.schemas_topic)
        self.input.prepare()
        discovery = Discovery(
            self.feed,
            clients.admin(self.source_conf),
            target_admin,
            excluded=topic_configs.Excluded.parse(opts.config_sync_exclude),
        )
        discovery.refresh()
        self.last_refresh = time.monotonic()
        self.gaps.count()  # 0 until a gap is reported, or carried by a task's marks
        self.reader.open(self.feed.name)
        self.taskset = TaskSet(
            ctx,
            opts,
            self.target_conf,
            self.instance_id,
            discovery=discovery,
            routes=self.routes,
            reader=self.reader,
            gaps=self.gaps,
            feed_input=self.input,
            route=self.route,
        )
        self.loop = CopyLoop(self.taskset, self.membership)
        self.target_sync = TargetSync(discovery)
        self.discovery = discovery  # last: /status says "normal" from here on
        ensure_control_topics(self.control_conf)
        self.membership.start(self.taskset)
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

    @property
    def tasks(self) -> dict[int, PullerTask]:
        return self.taskset.tasks if self.taskset is not None else {}

    def run(self, stop: threading.Event) -> None:
        """Copy until ``stop`` is set; raises FeedStopped on errors.tolerance=none."""
        self.start(stop)
        try:
            while not stop.is_set():
                self.step()
        finally:
            self.shutdown()

    def step(self) -> None:
        assert self.loop is not None and self.discovery is not None
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
        self.loop.step()

    def _apply_update(self, feed: FeedSpec) -> None:
        """A feed updated while running (PUT /v1/changefeeds): new topics are picked up
        at once; tasks started from now on use the new selection, rename format and
        options; a running task keeps what it started with until it restarts
        (``crossfeed changefeed restart``). Source, target, mode, start and the number of
        tasks never change (services/coordinator/updates.py)."""
        assert self.taskset is not None and self.discovery is not None
        self.feed = self.routes.feed = self.gaps.feed = feed
        self.taskset.ctx = dataclasses.replace(self.taskset.ctx, feed=feed)
        self.discovery.retarget(feed)
        self.last_refresh = 0.0  # look at the topics now
        self.gaps.apply_acks()
        log.info(
            "feed %s updated: topics %s%s, rename format %s; running tasks keep the old "
            "definition until they restart",
            feed.name,
            feed.topics,
            f" excluding {feed.exclude}" if feed.exclude else "",
            feed.rename_format,
        )

    def shutdown(self) -> None:
        """Commit what is open and leave the group, so others take the tasks at once."""
        if self.taskset is not None:
            for s in list(self.taskset.tasks):
                self.taskset.drop_task(s, commit=True)
        self.membership.close()
        if self.heartbeats is not None:
            self.heartbeats.leave()
        self.reader.close()
        log.info("puller %s stopped", self.instance_id)

    def _refresh(self) -> None:
        assert self.discovery is not None and self.taskset is not None
        try:
            new = self.discovery.refresh()
        except KafkaException as err:
            log.warning("topic discovery failed: %s", err)
            return
        metrics.FEED_ERROR.labels(self.feed.name).set(1 if self.discovery.errors else 0)
        self.taskset.add_found(new)

    def _sync_configs(self) -> None:
        assert self.target_sync is not None
        try:
            self.target_sync.sync_configs()
            if self.settings.puller.acl_sync:
                self.target_sync.sync_acls()
        except KafkaException as err:
            log.warning("topic config or ACL sync failed: %s", err)

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
        sync, found = self.target_sync, self.discovery
        if sync is None or found is None:
            return self.gaps.notices()
        return [
            *self.gaps.notices(),
            *sync.config_notices(),
            *found.notices(),
            *sync.acl_notices(),
        ]

    def _problem(self) -> str | None:
        """Why the instance makes no progress now, if it knows (heartbeat's last_error)."""
        if self.discovery is None:
            return self.start_problem
        assert self.taskset is not None  # set before discovery (start)
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
            *self.gaps.problems(),
            self.discovery.last_error,
            self.source.problem(),
            target,
            *(self.taskset.commit_errors.get(s) for s in list(self.tasks)),
        ]
        return "; ".join(p for p in problems if p) or None

    def status(self) -> dict[str, Any]:
        discovery = self.discovery
        problem = self._problem()
        reader = self.input.status()
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
        answer["gaps"] = self.gaps.status()
        if reader is not None:
            answer["debezium_reader"] = reader
        return answer


def _follower(feed: FeedSpec) -> SchemaFollower | None:
    """Mirror feeds whose records' schemas follow them (schema.registry.target_url)."""
    opts = feed.config
    if not (opts.schema_registry_target_url and opts.schema_registry_url):
        return None  # FeedSpec checks they come together, for mirror feeds only
    return SchemaFollower(opts.schema_registry_url, opts.schema_registry_target_url)


def _staging_limit(admin: Any, changes_topic: str, default: int) -> int:
    """The max.message.bytes of an existing staging topic: an older one may allow less,
    and a record that would not fit is a dead letter (a staging record the broker
    refuses would fail every transaction)."""
    try:
        configured = kafka_topics.config_value(admin, changes_topic, "max.message.bytes")
    except KafkaException as err:
        log.warning("cannot read max.message.bytes of %s (%s)", changes_topic, err)
        return default
    if configured and configured.isdigit():
        return min(default, int(configured))
    return default


def _feed_context(
    opts: PullerSettings,
    feed: FeedSpec,
    cluster_ids: tuple[str, str],
    staging_max: int,
    schemas_topic: str | None,
) -> FeedContext:
    """What the feed's tasks here share; ``cluster_ids``: the source's and the target's."""
    return FeedContext(
        feed=feed,
        source_cluster_id=cluster_ids[0],
        target_cluster_id=cluster_ids[1],
        changes_topic=topics.changes(feed.name),
        max_batch_records=opts.max_batch_records,
        max_batch_bytes=opts.max_batch_bytes,
        pack_bytes=opts.pack_bytes,
        commit_interval_s=opts.commit_interval_ms / 1000,
        backlog_commit_interval_s=opts.backlog_commit_interval_ms / 1000,
        resolved_interval_s=opts.resolved_interval_ms / 1000,
        staging_max_bytes=staging_max,
        schemas_topic=schemas_topic,
        follower=_follower(feed),
    )
