"""The sorter's Spark Structured Streaming job (docs/ordered-feeds.md §2 in, §3 out): its
skeleton, whichever engine releases a batch.

One query reads ``_crossfeed.<feed>.changes`` with Spark's Kafka source (read_committed,
headers) and hands every micro-batch to :meth:`SorterJob.process_batch` (foreachBatch),
which loads the state the previous batch saved and dispatches the batch to one of two
release engines with the same rules and the same output:

* :mod:`driver_release` — the batch read into the driver as Arrow (one Spark job, the
  Kafka read on the executors), parsed (:mod:`driver_rows`), released and written by the
  driver;
* :mod:`spark_release` — the batch parsed, sorted and written by Spark jobs, for what the
  driver must not hold; compaction of pending segments is always Spark's.

Every batch then takes the same steps, here: the marks' resolved_ts merged into the
state and the global resolved_ts R advanced (:meth:`SorterJob.advance`); the window
(R_prev, R] released by the engine; one resolved mark R (:meth:`SorterJob.resolved_mark`);
segments with nothing above R dropped, many compacted (:meth:`SorterJob.prune`); the state
saved under the batch id (atomic), so a batch Spark replays after a crash recomputes the
same output.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.services.sorter import driver_release, driver_rows, rules, sparkconf
from crossfeed.services.sorter.report import BatchReport, PartitionsSource
from crossfeed.services.sorter.rules import DriverState, Segment, Window
from crossfeed.services.sorter.segments import Store
from crossfeed.services.sorter.spark_release import SparkRelease, use_v2_kafka_writer
from crossfeed.wire import records, topics

log = logging.getLogger(__name__)

# Spark's Kafka source, after each poll, asks for the partition's offset range (two
# ListOffsets requests) on the connection where the consumer has just sent its next fetch;
# the broker answers one connection's requests in order, and at the end of the partition
# that fetch waits fetch.max.wait.ms (the client's 500 ms) for new data. A caught-up feed
# reads to the end of every partition in every batch, so each of a batch's tasks waited up
# to 500 ms (or until the next puller commit): a batch of resolved marks alone took 0.45 s
# in local[*] and seconds on a one-core executor. 10 ms keeps a poll from spinning; the
# sorter's own kafka_options override it.
SOURCE_DEFAULTS = {"kafka.fetch.max.wait.ms": "10"}


class SorterJob:
    def __init__(
        self,
        spark: SparkSession,
        feed: FeedSpec,
        store: Store,
        target_conf: dict[str, Any],
        kafka_options: dict[str, str],
        partitions: PartitionsSource,
        *,
        source_cluster_id: str,
        max_offsets_per_trigger: int,
        trigger_interval_ms: int,
        min_partitions: int = 0,
        max_records_per_read_task: int = 0,
        max_segments: int,
        driver_release_rows: int,
        on_batch: Callable[[BatchReport, DriverState], None],
    ) -> None:
        self.spark = spark
        self.feed = feed
        self.store = store
        self.kafka_options = kafka_options
        self.partitions = partitions
        self.source_cluster_id = source_cluster_id
        self.max_offsets_per_trigger = max_offsets_per_trigger
        self.min_partitions = min_partitions
        self.max_records_per_read_task = max_records_per_read_task
        self.trigger_interval_ms = trigger_interval_ms
        self.max_segments = max_segments
        self.driver_release_rows = driver_release_rows
        self.last_rows = 0  # rows of the previous batch (a big one: the next goes to Spark)
        self.on_batch = on_batch
        self.changes_topic = topics.changes(feed.name)
        self.sorted_topic = topics.sorted_(feed.name)
        self.producer = clients.producer(target_conf, **driver_release.RELEASE_PRODUCER)
        self.spark_release = SparkRelease(spark, feed, store, kafka_options, self.sorted_topic)
        self.driver_release = driver_release.DriverRelease(
            feed, store, self.producer, self.sorted_topic, driver_release_rows, self.spark_release
        )
        self.current: dict[str, Any] | None = None

    # -- the query ------------------------------------------------------------------------

    def start(self) -> Any:
        use_v2_kafka_writer(self.spark)
        reader = (
            self.spark.readStream.format("kafka")
            .options(**SOURCE_DEFAULTS)
            .options(**self.kafka_options)
            .option("subscribe", self.changes_topic)
            .option("startingOffsets", "earliest")
            .option("includeHeaders", "true")
            .option("kafka.isolation.level", "read_committed")
            .option("maxOffsetsPerTrigger", str(self.max_offsets_per_trigger))
            .options(
                **sparkconf.read_task_options(self.max_records_per_read_task, self.min_partitions)
            )
            .load()
        )
        writer = (
            reader.writeStream.queryName(f"crossfeed-sorter-{self.feed.name}")
            .option("checkpointLocation", str(self.store.spark_dir))
            .foreachBatch(self.process_batch)
        )
        if self.trigger_interval_ms > 0:
            writer = writer.trigger(processingTime=f"{self.trigger_interval_ms} milliseconds")
        return writer.start()

    # -- one micro-batch ------------------------------------------------------------------

    def step(self, batch_id: int, step: str | None) -> None:
        """The batch in progress and its step, for /status (None: between batches)."""
        self.current = (
            None if step is None else {"batch_id": batch_id, "step": step, "since": time.time()}
        )

    def process_batch(self, df: DataFrame, batch_id: int) -> None:
        self.step(batch_id, "read")
        started = time.monotonic()
        report = BatchReport(batch_id)
        prev = self.store.load_before(batch_id)
        # Segments the previous batch stopped using: only the batch before it (committed
        # now) still named them.
        self.store.delete_segments(prev.garbage)
        state = DriverState(
            batch_id=batch_id,
            resolved=dict(prev.resolved),
            expected=list(prev.expected),
            expected_at_s=prev.expected_at_s,
            advanced_at=dict(prev.advanced_at),
            resolved_ts=prev.resolved_ts,
        )
        # The dispatch. A Spark job costs 0.2-1 s of planning and scheduling whatever its
        # size, so a batch of at most driver_release_rows rows takes one (the Kafka read,
        # on the executors) and the driver releases it from Arrow; only a bigger batch,
        # which the driver must not hold, is released by Spark's jobs (the batch after a
        # big one goes there at once, with no read into the driver first).
        if self._driver_may_take():
            lap = time.monotonic()
            table = df.select(*driver_rows.RAW_COLUMNS).toArrow()
            report.timings["read"] = time.monotonic() - lap
            self.last_rows = table.num_rows
            if table.num_rows <= self.driver_release_rows:
                with _collector_paused():
                    self.driver_release.batch(self, table, prev, state, report)
                self._finish(report, state, started)
                return
            df = self.spark.createDataFrame(table)
        self.spark_release.batch(self, df, prev, state, report)
        self.last_rows = report.rows
        self._finish(report, state, started)

    def _driver_may_take(self) -> bool:
        limit = self.driver_release_rows
        return limit > 0 and self.last_rows <= limit

    def _finish(self, report: BatchReport, state: DriverState, started: float) -> None:
        self.store.save(state)
        report.pending_rows = state.pending_rows
        report.segments = len(state.segments)
        report.seconds = time.monotonic() - started
        self.step(report.batch_id, None)
        self.on_batch(report, state)

    def advance(self, state: DriverState, marks: dict[str, int]) -> Window:
        """Merge the batch's marks into ``state``; the window (R_prev, R] it releases."""
        now = time.time()
        fresh = self.partitions.keys
        if fresh is not None:
            state.resolved = rules.forget_removed(state.resolved, state.expected, fresh)
            state.expected = sorted(fresh)
            state.expected_at_s = self.partitions.at_s
        before = dict(state.resolved)
        state.resolved = rules.merge_resolved(state.resolved, marks)
        state.advanced_at = rules.advance_times(
            before, state.resolved, state.expected, state.advanced_at, now
        )
        candidate = (
            rules.global_resolved(state.resolved, state.expected)
            if state.expected or fresh is not None
            else None  # the source's partitions were never read: R cannot be known yet
        )
        return Window(state.resolved_ts, rules.next_resolved(state.resolved_ts, candidate))

    def prune(
        self, segments: list[Segment], resolved_ts: int, report: BatchReport
    ) -> tuple[list[Segment], list[str]]:
        """(kept, garbage): segments with nothing above R go; too many are compacted."""
        kept, dropped = rules.prune(segments, resolved_ts)
        garbage = [s.name for s in dropped]
        if rules.should_compact(kept, self.max_segments):
            merged = self.spark_release.compact(kept, report.batch_id, resolved_ts)
            garbage += [s.name for s in kept]
            kept = [merged] if merged.rows else []
            if not merged.rows:
                garbage.append(merged.name)
            report.compacted = True
        return kept, garbage

    def resolved_mark(self, resolved_ts: int, flush: bool = True) -> None:
        value = records.resolved_mark(
            source_cluster=self.source_cluster_id,
            topic="",
            partition=-1,
            resolved_ts_us=resolved_ts,
            next_offset=-1,
        )
        self.producer.produce(
            self.sorted_topic,
            partition=0,
            key=None,
            value=value,
            headers=records.resolved_mark_headers(resolved_ts),
        )
        if flush and self.producer.flush(30) != 0:
            raise RuntimeError(f"could not write the resolved mark {resolved_ts} in 30 s")


@contextlib.contextmanager
def _collector_paused() -> Any:
    """Python's cyclic garbage collector off for a driver batch. The batch makes a few
    objects per change (the records it produces; none form cycles) and each of the
    collector's passes, triggered every few hundred of them, walks them and everything
    else the driver holds: measured, that tripled the release's time. Memory is still
    freed as usual (by reference counting); cycles wait for the end of the batch."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def build_session(conf: dict[str, str], local: bool) -> SparkSession:
    """A SparkSession with ``conf`` (a running one under spark-submit keeps its own)."""
    if local:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    quiet_trigger_warnings(spark)
    return spark


TRIGGER_LOGGER = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"
"""Spark's logger of "Current batch is falling behind. The trigger interval is ..."."""


def quiet_trigger_warnings(spark: SparkSession) -> None:
    """Spark warns whenever a micro-batch takes longer than its trigger interval, which at
    the sorter's 100 ms is nearly every batch with work in it: its logger keeps errors
    only, and the worker warns itself when a batch really falls behind
    (``rules.falls_behind``)."""
    try:
        jvm: Any = spark.sparkContext._jvm
        log4j = jvm.org.apache.logging.log4j
        log4j.core.config.Configurator.setLevel(TRIGGER_LOGGER, log4j.Level.ERROR)
    except Exception as err:  # another logging backend: Spark's warnings stay
        logging.getLogger(__name__).debug("Spark's trigger warnings stay: %s", err)
