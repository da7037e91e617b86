"""The sorter's Spark Structured Streaming job (docs/ordered-feeds.md §2 in, §3 out): the
sequence of every micro-batch, whichever engine releases it.

One query reads ``_crossfeed.<feed>.changes`` with Spark's Kafka source (read_committed,
headers) and hands every micro-batch to :meth:`SorterJob.process_batch` (foreachBatch),
which loads the state the previous batch saved and takes the same steps, in one order,
for every batch:

1. read — the batch's rows parsed: read into the driver as Arrow (one Spark job, the
   Kafka read on the executors) and parsed there (driver_rows.py), or, for a batch the
   driver must not hold, parsed and written as a segment by Spark
   (:meth:`spark_release.SparkRelease.stage`);
2. decide — the marks' resolved_ts merged into the state and the global resolved_ts R
   advanced (:meth:`SorterJob.advance`), so the window (R_prev, R]; then the engine that
   releases it, once, with its reason (rules.choose);
3. release — by that engine (:mod:`driver_release`, :mod:`spark_release`), told the
   window, the pending segments and the batch's rows; it returns what it did
   (report.Released) and calls nothing back;
4. one resolved mark R (:meth:`SorterJob.resolved_mark`);
5. prune — segments with nothing above R dropped, many compacted (:meth:`SorterJob.prune`);
6. the state saved under the batch id (atomic), so a batch Spark replays after a crash
   recomputes the same output.
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
from crossfeed.services.sorter import driver_rows, rules, sparkconf
from crossfeed.services.sorter.driver_release import RELEASE_PRODUCER, DriverRelease
from crossfeed.services.sorter.report import BatchReport, PartitionsSource, Released
from crossfeed.services.sorter.rules import DriverState, Segment, Window
from crossfeed.services.sorter.segments import Store
from crossfeed.services.sorter.spark_release import SparkRelease, Staged, use_v2_kafka_writer
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
        self.producer = clients.producer(target_conf, **RELEASE_PRODUCER)
        self.spark_release = SparkRelease(spark, feed, store, kafka_options, self.sorted_topic)
        self.driver_release = DriverRelease(feed, store, self.producer, self.sorted_topic)
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
        """One micro-batch, in the same order whichever engine releases it: read, decide,
        release, resolved mark, prune, state saved.

        Crash safety. Nothing before the state is saved changes what the next batch
        starts from: a batch runs from the state the batch before it saved (``prev``), and
        Spark runs a batch again, with the same offsets, until one run returns. So a run
        cut short anywhere is redone from the same inputs with the same output: records
        written twice are a replayed suffix of `.sorted` that sinks drop by position, and
        the segments it wrote (named after the batch) are written again. Segments it
        stops using are only listed (``garbage``) and deleted when the next batch starts,
        once Spark has committed this one, so a replay still finds every segment it read.
        """
        started = time.monotonic()
        self.step(batch_id, "read")
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
        batch, not_driver = self._read(df, prev, report)
        with _collector_paused():
            # Decide: the marks merged, the window (R_prev, R], the engine.
            lap = time.monotonic()
            report.rows, report.marks = batch.rows, batch.mark_rows
            window = self.advance(state, batch.marks)
            choice = self._choose(batch, not_driver, window, prev.segments)
            report.engine, report.reason = choice.engine, choice.reason
            log.debug(
                "batch %d: the %s engine (%s), window %s",
                batch_id,
                choice.engine,
                choice.reason,
                window,
            )
            report.timings["decide"] = time.monotonic() - lap
            # Release: every record of the window written and flushed when it returns.
            self.step(batch_id, "release")
            lap = time.monotonic()
            released = self._release(batch_id, batch, window, choice, prev.segments)
            report.timings["release"] = time.monotonic() - lap
            report.released_events = released.events
            report.released_txns = released.txns
            report.dead_letters = released.dead_letters
            # The resolved mark, then pruning. The mark follows the records it covers
            # (flushed by the release), so no reader sees R before them, and it goes out
            # before pruning, whose compaction (a Spark job, up to a second) would only
            # delay it: pruning writes nothing a replay cannot redo (it lists the segments
            # to drop; a compaction writes a new segment named after the batch) and
            # nothing of it counts until the state is saved. A crash in between replays
            # the batch: its records and its mark again, which sinks drop by position.
            if not window.empty:
                self.step(batch_id, "resolved mark")
                lap = time.monotonic()
                self.resolved_mark(window.resolved_ts)
                report.timings["mark"] = time.monotonic() - lap
            state.resolved_ts = report.resolved_ts = window.resolved_ts
            state.segments, garbage = self.prune(released.segments, window.resolved_ts, report)
            state.garbage = released.garbage + garbage
        self._finish(report, state, started)

    def _read(
        self, df: DataFrame, prev: DriverState, report: BatchReport
    ) -> tuple[driver_rows.Batch | Staged, rules.Reason | None]:
        """The batch's rows, parsed: into the driver as Arrow when they may fit there (one
        Spark job, the Kafka read on the executors), else by Spark, which writes them as
        the batch's segment on the way (and then releases the batch), with the reason.

        A Spark job costs 0.2-1 s of planning and scheduling whatever its size, so a batch
        of at most driver_release_rows rows takes one, and only a bigger batch, which the
        driver must not hold, is parsed and released by Spark's jobs (the batch after a
        big one goes there at once, with no read into the driver first)."""
        limit = self.driver_release_rows
        not_driver = rules.driver_reads(limit, self.last_rows)
        if not_driver is None:
            lap = time.monotonic()
            table = df.select(*driver_rows.RAW_COLUMNS).toArrow()
            report.timings["read"] = time.monotonic() - lap
            self.last_rows = table.num_rows
            if table.num_rows <= limit:
                lap = time.monotonic()
                batch = driver_rows.parse_batch(table)
                report.timings["parse"] = time.monotonic() - lap
                return batch, None
            not_driver = rules.Reason.BIG_BATCH
            df = self.spark.createDataFrame(table)
        self.step(report.batch_id, "segment")
        lap = time.monotonic()
        staged = self.spark_release.stage(df, report.batch_id, prev.resolved_ts)
        report.timings["segment"] = time.monotonic() - lap
        self.last_rows = staged.rows
        return staged, not_driver

    def _choose(
        self,
        batch: driver_rows.Batch | Staged,
        not_driver: rules.Reason | None,
        window: Window,
        pending: list[Segment],
    ) -> rules.Choice:
        """The engine that releases the batch, chosen once, before its release: Spark for
        a batch Spark parsed (``not_driver`` says why), else the driver unless a commit_ts
        of the window holds more changes than it may hold."""
        if isinstance(batch, Staged):
            assert not_driver is not None  # a batch Spark parsed is one the driver did not
            return rules.Choice(rules.Engine.SPARK, not_driver)
        counts = self.driver_release.ts_counts(window, pending, batch) if not window.empty else {}
        return rules.choose(counts, window, self.driver_release_rows)

    def _release(
        self,
        batch_id: int,
        batch: driver_rows.Batch | Staged,
        window: Window,
        choice: rules.Choice,
        pending: list[Segment],
    ) -> Released:
        """The batch released by the engine ``choice`` names: told the window (in parts,
        for the driver), the pending segments and the batch's rows; it returns what it
        did."""
        if isinstance(batch, Staged):
            return self.spark_release.release(batch_id, window, pending, batch)
        if choice.engine is rules.Engine.DRIVER:
            return self.driver_release.release(batch_id, batch, window, choice.parts, pending)
        # Parsed by the driver, sorted by Spark (a commit_ts too big for the driver): the
        # driver writes the batch's dead letters and keeps its rows as a segment (no
        # part: it releases nothing), then Spark releases the window from the segments.
        kept = self.driver_release.release(batch_id, batch, window, (), pending)
        out = self.spark_release.release(batch_id, window, kept.segments, None)
        out.dead_letters += kept.dead_letters
        out.garbage = kept.garbage + out.garbage
        return out

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
        """(kept, garbage): segments with nothing above R go; too many are compacted into
        one by Spark (the old ones become garbage)."""
        kept, dropped = rules.prune(segments, resolved_ts)
        garbage = [s.name for s in dropped]
        if rules.should_compact(kept, self.max_segments):
            self.step(report.batch_id, "compact")
            lap = time.monotonic()
            merged = self.spark_release.compact(kept, report.batch_id, resolved_ts)
            garbage += [s.name for s in kept]
            kept = [merged] if merged.rows else []
            if not merged.rows:
                garbage.append(merged.name)
            report.compacted = True
            report.timings["compact"] = time.monotonic() - lap
        return kept, garbage

    def resolved_mark(self, resolved_ts: int) -> None:
        """One resolved mark R into `.sorted`, flushed."""
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
        if self.producer.flush(30) != 0:
            raise RuntimeError(f"could not write the resolved mark {resolved_ts} in 30 s")


@contextlib.contextmanager
def _collector_paused() -> Any:
    """Python's cyclic garbage collector off for a batch's work after its read. The
    driver's release makes a few objects per change (the records it produces; none form
    cycles) and each of the collector's passes, triggered every few hundred of them,
    walks them and everything else the driver holds: measured, that tripled the
    release's time. Memory is still freed as usual (by reference counting); cycles wait
    for the end of the batch."""
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
