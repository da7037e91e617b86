"""One sorter instance: checks, the Spark query, heartbeats, metrics and /status.

The Spark job (:mod:`crossfeed.services.sorter.job`) does the sorting; this module starts
and stops it, keeps the feed's expected source partitions fresh (:mod:`refresher`: source
metadata, refreshed every ``sorter.partitions_refresh_s`` and persisted with the driver
state, so a lost source cluster does not lose them), and reports (batches:
:mod:`progress`): per-partition resolved_ts, the global R, and the *laggards* — partitions
holding R back whose resolved_ts has not moved for ``sorter.laggard_after_s`` — in
/status, ``crossfeed_sorter_laggard_seconds`` and the heartbeat (``resolved`` per
partition, ``laggards``: partition -> since, µs).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.kafka.reachability import wait_for_cluster
from crossfeed.membership import HeartbeatContent, HeartbeatSender, ensure_control_topics
from crossfeed.services.sorter import metrics, progress, rules, sparkconf
from crossfeed.services.sorter.progress import Progress
from crossfeed.services.sorter.quiet import QuietWatch
from crossfeed.services.sorter.refresher import PartitionsRefresher
from crossfeed.services.sorter.report import BatchReport, PartitionsSource
from crossfeed.services.sorter.rules import DriverState
from crossfeed.services.sorter.segments import Store
from crossfeed.wire import topics

if TYPE_CHECKING:  # pyspark is imported when the job starts (run)
    from crossfeed.services.sorter.job import SorterJob

log = logging.getLogger(__name__)


class SorterFailed(RuntimeError):
    """The Spark query stopped with an error (the message carries Spark's)."""


def _reason(error: str) -> str:
    """The useful line of a Spark error (the Python traceback's last, or the first)."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    for line in lines:
        if "Exception:" in line or "Error:" in line:
            return line[:500]
    return (lines[0] if lines else error)[:500]


class SorterWorker:
    def __init__(
        self,
        settings: Settings,
        feed: FeedSpec,
        instance_id: str,
        target_alias: str,
        control_conf: dict[str, Any],
    ) -> None:
        self.settings = settings
        self.opts = settings.sorter
        self.feed = feed
        self.instance_id = instance_id
        self.target_alias = target_alias
        self.target_conf = settings.cluster(target_alias).client_config()
        self.source_conf = settings.cluster(feed.source).client_config()
        self.control_conf = control_conf
        self.address = ""
        self.state = "starting"
        self.last_error = ""
        self.started_s = time.time()
        self.store = Store(sparkconf.checkpoint_root(self.opts, feed.name))
        self.snapshot = DriverState()
        self.last_batch: dict[str, Any] | None = None
        self.progress = Progress(feed.name, self.opts.trigger_interval_ms)
        self.heartbeats: HeartbeatSender | None = None
        self.job: SorterJob | None = None
        self.quiet: QuietWatch | None = None
        self._lock = threading.Lock()
        self.partitions = PartitionsSource()
        self._labels = (feed.name,)
        self.idle = rules.IdleWatch(self.opts.laggard_after_s, self.started_s)

    # -- life cycle -----------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        sparkconf.check_java()
        local = sparkconf.is_local(self.opts)
        jar_list = [] if sparkconf.under_spark_submit() else sparkconf.jars()
        target_id = wait_for_cluster(self.target_alias, self.target_conf, stop)
        source_id = clients.cluster_id(self.source_conf) or ""
        admin = clients.admin(self.target_conf)
        sorted_topic = topics.sorted_(self.feed.name)
        # The pullers may not have created .changes yet: Spark's source fails on a
        # missing topic, so create it as they would.
        kafka_topics.ensure_internal(
            admin, topics.changes(self.feed.name), self.feed.config.staging_partitions
        )
        kafka_topics.ensure_internal(admin, sorted_topic)
        kafka_topics.ensure_internal(admin, topics.DLQ)
        self.store.open()
        self.snapshot = self.store.latest()
        ensure_control_topics(self.control_conf)
        self.heartbeats = HeartbeatSender(
            self.control_conf, self.instance_id, "sorter", self._heartbeat
        ).start()
        PartitionsRefresher(
            self.feed,
            self.source_conf,
            self.partitions,
            self.opts.partitions_refresh_s,
            lambda: len(self.snapshot.expected),
        ).start(stop)

        from crossfeed.services.sorter.job import SorterJob, build_session

        conf = sparkconf.spark_conf(self.opts, self.feed.name, jar_list)
        log.info(
            "sorter %s for feed %s: %s -> %s on %s (%s), Spark master %s, checkpoints %s",
            self.instance_id,
            self.feed.name,
            topics.changes(self.feed.name),
            sorted_topic,
            self.target_alias,
            target_id,
            conf.get("spark.master", "from spark-submit"),
            self.store.root,
        )
        spark = build_session(conf, local)
        job = SorterJob(
            spark,
            self.feed,
            self.store,
            self.target_conf,
            sparkconf.kafka_options(
                self.settings.cluster(self.target_alias).properties, self.opts.kafka_options
            ),
            self.partitions,
            source_cluster_id=source_id,
            max_offsets_per_trigger=self.opts.max_offsets_per_trigger,
            min_partitions=self.opts.min_partitions,
            max_records_per_read_task=self.opts.max_records_per_read_task,
            trigger_interval_ms=self.opts.trigger_interval_ms,
            max_segments=self.opts.max_segments,
            driver_release_rows=self.opts.driver_release_rows,
            on_batch=self._on_batch,
        )
        self.job = job
        quiet = self.quiet = QuietWatch(
            self.target_conf, self.feed.name, self.store.spark_dir / "offsets", stop
        )
        query = job.start()
        self.state = "running"
        error: str | None = None
        try:
            while not stop.is_set():
                try:
                    done = query.awaitTermination(1.0)
                except Exception as exc:  # StreamingQueryException: the query failed
                    error = str(exc) or type(exc).__name__
                    break
                if done:
                    error = "the Spark query stopped by itself"
                    break
                self.progress.note_spark(query)
                self._update_gauges()
        finally:
            self.state = "stopping"
            if error is None:
                log.info("stopping the Spark query")
                # Stopping cancels the batch in progress: its foreachBatch call fails in
                # Python and the JVM goes away under py4j's callback server, which py4j
                # logs as errors with tracebacks. Both are expected here (Spark runs the
                # batch again on the next start), so a graceful stop says nothing of them.
                logging.getLogger("py4j").setLevel(logging.CRITICAL)
                try:
                    query.stop()
                except Exception as err:  # the JVM may be going away already
                    log.warning("stopping the query: %s", err)
            spark.stop()
            quiet.close()
            if self.heartbeats is not None:
                self.heartbeats.leave()
            self.store.close()
        if error is not None:
            self.state = "failed"
            self.last_error = error
            log.error("the Spark query failed: %s", error)
            raise SorterFailed(f"the sorter's Spark query failed: {_reason(error)}")
        log.info("sorter %s stopped", self.instance_id)

    # -- reporting ------------------------------------------------------------------------

    def _on_batch(self, report: BatchReport, state: DriverState) -> None:
        with self._lock:
            self.snapshot = state
            changes = report.rows - report.marks
            self.idle.note(changes, state.pending_rows, state.resolved_ts, time.time())
            self.last_batch = progress.summary(report)
        self.progress.count(report)
        self._update_gauges()
        self._pause_if_quiet(report.batch_id, changes, state)

    def _pause_if_quiet(self, batch_id: int, changes: int, state: DriverState) -> None:
        """After a batch of marks alone, with nothing pending: Spark's next batch waits
        until a change arrives, or for ``sorter.quiet_pause_ms`` (quiet.py). The batch is
        over (its state saved, reported): the pause is not part of its time."""
        pause = rules.quiet_pause_s(
            changes,
            state.pending_rows,
            state.resolved_ts,
            self.opts.quiet_pause_ms,
            self.opts.laggard_after_s,
        )
        if not pause or self.quiet is None or self.job is None:
            return
        self.job.step(batch_id, "quiet")
        ended = self.quiet.wait(batch_id, pause)
        self.job.step(batch_id, None)
        log.debug("batch %d: the quiet pause ended: %s", batch_id, ended)

    def _laggards(self, state: DriverState, now: float) -> list[rules.Laggard]:
        expected = self.partitions.keys if self.partitions.keys is not None else state.expected
        advanced = {k: v for k, v in state.advanced_at.items()}
        for key in expected:
            advanced.setdefault(key, self.started_s)
        return rules.laggards(state.resolved, expected, advanced, now, self.opts.laggard_after_s)

    def _update_gauges(self) -> None:
        with self._lock:
            state = self.snapshot
        now = time.time()
        if state.resolved_ts >= 0:
            metrics.RESOLVED_TS.labels(*self._labels).set(state.resolved_ts / 1e6)
        metrics.PENDING.labels(*self._labels).set(state.pending_rows)
        metrics.SEGMENTS.labels(*self._labels).set(len(state.segments))
        lagging = {lag.partition: lag for lag in self._laggards(state, now)}
        keys = set(state.resolved) | set(state.expected) | set(self.partitions.keys or ())
        for key in keys:
            topic, _, part = key.rpartition("/")
            labels = (self.feed.name, topic, part)
            if key in state.resolved:
                metrics.PARTITION_RESOLVED_TS.labels(*labels).set(state.resolved[key] / 1e6)
            lag = lagging.get(key)
            metrics.LAGGARD_SECONDS.labels(*labels).set(now - lag.since_s if lag else 0.0)

    def _heartbeat(self) -> HeartbeatContent:
        with self._lock:
            state = self.snapshot
        laggards = {
            lag.partition: int(lag.since_s * 1e6) for lag in self._laggards(state, time.time())
        }
        return HeartbeatContent(
            tasks=[f"{self.feed.name}/sorter"],
            feeds=[self.feed.name],
            state="running" if self.state == "running" else self.state,
            address=self.address,
            resolved=dict(state.resolved),
            laggards=laggards,
            last_error=self.last_error,
            idle_since_us=self.idle.idle_since(time.time()),
        )

    def status(self) -> dict[str, Any]:
        with self._lock:
            state = self.snapshot
            last = self.last_batch
        now = time.time()
        laggards = self._laggards(state, now)
        expected = self.partitions.keys if self.partitions.keys is not None else state.expected
        r = state.resolved_ts
        return {
            "role": "sorter",
            "instance": self.instance_id,
            "feed": self.feed.name,
            "state": self.state,
            "last_error": self.last_error or None,
            "resolved_ts_us": r if r >= 0 else None,
            "resolved_ts": progress.iso(r / 1e6) if r >= 0 else None,
            "partitions": {
                key: {
                    "resolved_ts_us": state.resolved.get(key),
                    "advanced_at": progress.iso(state.advanced_at.get(key)),
                }
                for key in sorted(set(expected) | set(state.resolved))
            },
            "holding_back": rules.holding_back(state.resolved, expected),
            "laggards": [
                {
                    "partition": lag.partition,
                    "resolved_ts_us": lag.resolved_ts_us,
                    "since": progress.iso(lag.since_s),
                    "seconds": round(now - lag.since_s, 1),
                }
                for lag in laggards
            ],
            "pending_events": state.pending_rows,
            "idle_since_us": self.idle.idle_since(now) or None,
            "pending_segments": len(state.segments),
            "last_batch": last,
            "current_batch": self.job.current if self.job is not None else None,
            "spark_progress": self.progress.spark_progress,
            "checkpoint_dir": str(self.store.root),
        }
