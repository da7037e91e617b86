"""The sorter's Spark Structured Streaming job (docs/ordered-feeds.md §2 in, §3 out).

One query reads ``_crossfeed.<feed>.changes`` with Spark's Kafka source (read_committed,
headers) and hands every micro-batch to :meth:`SorterJob.process_batch` (foreachBatch).
Each Spark job costs 0.2-1 s of planning and scheduling here whatever its size, so a batch
takes one of two paths with the same rules and output:

* the driver path, for every batch of at most ``sorter.driver_release_rows`` rows: one
  Spark job reads the batch into the driver as Arrow, and :mod:`driver_release` and
  :mod:`arrow_segments` do the steps below in Python, a big window in parts of at most
  ``driver_release_rows`` changes; only a transaction bigger than that and the
  compaction of many segments run as Spark jobs, so the driver's memory stays bounded;
* the Spark path for a bigger batch: all per-row work runs as Spark SQL expressions in the
  JVM; the Python driver only sees what Spark *observes* on the rows it writes (counts,
  and the batch's resolved marks) and decides. Two Spark jobs:

1. parse the batch's rows (kind, commit_ts, transaction, source partition) and write
   them as a parquet *segment* under the checkpoint directory (pending changes live on
   disk; the driver path keeps the one it wrote last in memory too),
   observing the batch's statistics;
2. take the max resolved_ts per source partition from the observed marks, merge it into
   the driver state and compute the global resolved_ts R (:mod:`crossfeed.services.sorter.rules`);
3. if R went up, release every complete transaction with R_prev < commit_ts <= R from all
   pending segments (completeness by window aggregates per transaction, no join), with
   begin/commit markers, sorted globally by (commit_ts, txn, ord)
   in one partition (Spark sorts with spill), into ``_crossfeed.<feed>.sorted`` with
   Spark's Kafka writer; incomplete transactions at <= R, late and unreadable changes go
   to ``_crossfeed.dlq`` in the same write; then one resolved mark (driver);
4. drop segments whose newest change is <= R (compact the rest when there are many) and
   save the driver state under the batch id (atomic), so a batch Spark replays after a
   crash recomputes the same output from the previous batch's state.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import Window as SparkWindow
from pyspark.sql import functions as F

from crossfeed import dlq
from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.services.sorter import arrow_segments, driver_release, rules
from crossfeed.services.sorter.rules import DriverState, Segment, Window
from crossfeed.services.sorter.store import Store
from crossfeed.wire import codec, headers, topics

log = logging.getLogger(__name__)

# Java regexes (Spark's rlike finds a match anywhere, hence ^); \z, not $, which in Java
# also matches before a final line terminator (rules.py and driver_release.py: the same).
TXN_RE = r"^([^/:]+)/([0-9]{1,9})/([0-9]{1,9})\z"
SRC_RE = r"^([^/]*)/([^/]+)/([0-9]{1,9})/([0-9]{1,19})\z"
MARK_KEY_RE = r"^([^/]+)/([0-9]{1,9})\z"
TS_RE = r"^[0-9]{1,18}\z"

ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner chooses

# What the driver path reads of a batch (Spark's Kafka source columns).
RAW_COLUMNS = ("key", "value", "headers", "topic", "partition", "offset", "timestamp")

# The driver path's producer. A batch's records are produced in one go and then flushed
# (which sends at once, whatever linger.ms): the producer batches them, and its queue holds
# a whole window part with its markers instead of making the loop wait for deliveries.
# Delivery reports for failures only: a report per record is a Python call per record
# while flush() waits — 100,000 records (50,000 changes of bank transfers with their
# markers) flushed in 0.19 s instead of 0.37 s here — and only a failure matters.
RELEASE_PRODUCER = {
    "linger.ms": 20,
    "batch.size": 1 << 20,
    "queue.buffering.max.messages": 1_000_000,
    "delivery.report.only.error": True,
}

# Spark's Kafka source, after each poll, asks for the partition's offset range (two
# ListOffsets requests) on the connection where the consumer has just sent its next fetch;
# the broker answers one connection's requests in order, and at the end of the partition
# that fetch waits fetch.max.wait.ms (the client's 500 ms) for new data. A caught-up feed
# reads to the end of every partition in every batch, so each of a batch's tasks waited up
# to 500 ms (or until the next puller commit): a batch of resolved marks alone took 0.45 s
# in local[*] and seconds on a one-core executor. 10 ms keeps a poll from spinning; the
# sorter's own kafka_options override it.
SOURCE_DEFAULTS = {"kafka.fetch.max.wait.ms": "10"}

# Writer defaults measured here: 55k rec/s Kafka-to-Kafka vs 33-44k with the client's.
WRITER_DEFAULTS = {
    "kafka.linger.ms": "5",
    "kafka.batch.size": "262144",
    "kafka.max.request.size": str(64 << 20),
}


def _header(name: str) -> Column:
    """The first value of header ``name`` as a string (null when absent)."""
    return F.expr(f"try_element_at(filter(headers, h -> h.key = '{name}'), 1).value").cast("string")


def _bin(text: Column | str) -> Column:
    col = F.lit(text) if isinstance(text, str) else text
    return col.cast("binary")


def _h(name: str, value: Column | str) -> Column:
    return F.struct(F.lit(name).alias("key"), _bin(value).alias("value"))


def parse(df: DataFrame) -> DataFrame:
    """Rows of the changes topic -> the columns the sorter decides on (rules.parse_*).

    In stages, each header looked up once: Spark does not inline a non-trivial column
    into several uses, so the header search and the regexes run once per row (one big
    expression repeated them and cost more in code generation than in work)."""
    col = F.col
    step1 = df.select(
        "key",
        "value",
        "headers",
        "topic",
        "partition",
        "offset",
        F.expr("unix_millis(timestamp)").alias("timestamp_ms"),
        _header(headers.TYPE).alias("h_type"),
        _header(headers.COMMIT_TS).alias("h_ts"),
        _header(headers.TXN).alias("h_txn"),
        _header(headers.SRC).alias("h_src"),
    )
    step2 = step1.select(
        "*",
        F.when(col("h_ts").rlike(TS_RE), col("h_ts").cast("long")).alias("commit_ts"),
        F.when(col("h_src").rlike(SRC_RE), F.split(col("h_src"), "/")).alias("src_parts"),
        F.when(col("h_txn").rlike(TXN_RE), F.split(col("h_txn"), "/")).alias("txn_parts"),
    )
    src, txn = col("src_parts"), col("txn_parts")
    no_txn = col("h_txn").isNull()
    step3 = step2.select(
        "*",
        F.when(no_txn & src.isNotNull(), F.concat_ws(":", src))
        .when(txn.isNotNull(), F.get(txn, 0))
        .alias("txn_id"),
        F.when(no_txn, F.lit(1)).when(txn.isNotNull(), F.get(txn, 1).cast("int")).alias("seq"),
        F.when(no_txn, F.lit(1)).when(txn.isNotNull(), F.get(txn, 2).cast("int")).alias("count"),
    )
    typ, commit_ts = col("h_type"), col("commit_ts")
    key_text = col("key").cast("string")
    error = (
        F.when(
            typ == headers.TYPE_RESOLVED,
            F.when(
                key_text.isNull() | ~key_text.rlike(MARK_KEY_RE),
                F.lit("resolved mark key is not topic/partition"),
            ).when(commit_ts.isNull(), F.lit(f"resolved mark without a valid {headers.COMMIT_TS}")),
        )
        .when(typ.isNotNull(), F.concat(F.lit(f"unknown {headers.TYPE} "), typ))
        .when(commit_ts.isNull(), F.lit(f"no valid {headers.COMMIT_TS} header"))
        .when(col("txn_id").isNull(), F.lit(f"{headers.TXN} and {headers.SRC} unreadable"))
        .when(
            (col("seq") < 1) | (col("seq") > col("count")),
            F.lit(f"{headers.TXN} seq outside 1..count"),
        )
    )
    step4 = step3.select("*", error.alias("error"))
    kind = (
        F.when(col("error").isNotNull(), F.lit("bad"))
        .when(typ == headers.TYPE_RESOLVED, F.lit("mark"))
        .otherwise(F.lit("data"))
    )
    return step4.select(
        "key",
        "value",
        "headers",
        "timestamp_ms",
        kind.alias("kind"),
        "commit_ts",
        F.when(typ == headers.TYPE_RESOLVED, key_text).alias("part"),
        "txn_id",
        "seq",
        "count",
        F.coalesce(F.get(src, 0), F.lit("")).alias("src_cluster"),
        F.coalesce(F.get(src, 1), col("topic")).alias("src_topic"),
        F.coalesce(F.get(src, 2).cast("int"), col("partition")).alias("src_partition"),
        F.coalesce(F.get(src, 3).cast("long"), col("offset")).alias("src_offset"),
        "error",
    )


@dataclass
class BatchReport:
    """What one micro-batch did (for metrics, /status and logs)."""

    batch_id: int
    rows: int = 0
    marks: int = 0
    released_events: int = 0
    released_txns: int = 0
    dead_letters: int = 0
    resolved_ts: int = rules.NOTHING_RELEASED
    seconds: float = 0.0
    pending_rows: int = 0
    segments: int = 0
    compacted: bool = False
    timings: dict[str, float] = field(default_factory=dict)


class PartitionsSource:
    """The feed's expected source partitions; set from outside (a refresher thread)."""

    def __init__(self) -> None:
        self.keys: frozenset[str] | None = None
        self.at_s = 0.0

    def set(self, keys: frozenset[str]) -> None:
        self.keys, self.at_s = keys, time.time()


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
        self.trigger_interval_ms = trigger_interval_ms
        self.max_segments = max_segments
        self.driver_release_rows = driver_release_rows
        self.last_rows = 0  # rows of the previous batch (a big one: the next goes to Spark)
        self.cache: tuple[str, Any] | None = None  # the segment this process wrote last (a table)
        self.on_batch = on_batch
        self.changes_topic = topics.changes(feed.name)
        self.sorted_topic = topics.sorted_(feed.name)
        self.producer = clients.producer(target_conf, **RELEASE_PRODUCER)
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

    def _step(self, batch_id: int, step: str | None) -> None:
        """The batch in progress and its step, for /status (None: between batches)."""
        self.current = (
            None if step is None else {"batch_id": batch_id, "step": step, "since": time.time()}
        )

    def process_batch(self, df: DataFrame, batch_id: int) -> None:
        self._step(batch_id, "read")
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
            released_ts=prev.released_ts,
        )
        if self._driver_may_take():
            # One Spark job (the Kafka read) and the rest in the driver; a batch that turns
            # out big goes the Spark way with the rows already read.
            lap = time.monotonic()
            table = df.select(*RAW_COLUMNS).toArrow()
            report.timings["read"] = time.monotonic() - lap
            self.last_rows = table.num_rows
            if table.num_rows <= self.driver_release_rows:
                with _collector_paused():
                    self._driver_batch(table, prev, state, report)
                self._finish(report, state, started)
                return
            df = self.spark.createDataFrame(table)
        self._spark_batch(df, prev, state, report)
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
        self._step(report.batch_id, None)
        self.on_batch(report, state)

    def _advance(self, state: DriverState, marks: dict[str, int]) -> Window:
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
        return Window(state.released_ts, rules.next_resolved(state.released_ts, candidate))

    # -- the driver path ----------------------------------------------------------------

    def _driver_batch(
        self, table: Any, prev: DriverState, state: DriverState, report: BatchReport
    ) -> None:
        """The batch's rows are in ``table``; parse, release and keep the rest pending
        here (driver_release.py), with the Spark path's rules and output."""
        self._step(report.batch_id, "release")
        lap = time.monotonic()
        parsed = driver_release.parse(table)
        kind = parsed.column("kind")
        marks = parsed.filter(pc.equal(kind, "mark"))
        report.rows = parsed.num_rows
        report.marks = marks.num_rows
        marked = zip(
            marks.column("part").to_pylist(), marks.column("commit_ts").to_pylist(), strict=True
        )
        window = self._advance(state, rules.max_marks(marked))
        bad, late = pc.equal(kind, "bad"), driver_release.late(parsed, window)
        letters = [
            driver_release.late_letter(r, self.feed.name, window)
            if r.kind == "data"
            else driver_release.dead_letter(r, self.feed.name, "UnreadableChange", r.error or "")
            for r in driver_release.rows_of(parsed.filter(pc.or_(bad, late)))
        ]
        unreadable = len(letters)  # bad and late rows of this batch: dead letters
        pending = parsed.filter(pc.and_(pc.equal(kind, "data"), pc.invert(late)))
        name = f"seg-{report.batch_id:012d}"
        kept = list(prev.segments)
        released = driver_release.Released()
        by_spark = False  # the window holds too many changes for the driver: Spark sorts it
        if not window.empty:
            counts: Counter[int] = Counter(driver_release.ts_counts(pending, window))
            for segment in kept:
                counts.update(self._ts_counts(segment, window))
            # A window too big to hold is released in parts, a few commit_ts at a time.
            parts = driver_release.split(counts, window, self.driver_release_rows)
            if parts is None:
                by_spark = True  # one commit_ts holds more than the driver may
            else:
                self._produce(letters, None)
                letters = []
                for part in parts:
                    rows_in = pa.concat_tables(
                        [
                            *(self._window_rows(s, part) for s in kept),
                            pending.filter(driver_release.inside(pending, part)),
                        ]
                    )
                    done = driver_release.release(rows_in, part, self.feed.name, window.high)
                    self._produce(done.records, None)
                    released.events += done.events
                    released.txns += done.txns
                    released.dead_letters += done.dead_letters
                pending = pending.filter(pc.greater(pending.column("commit_ts"), window.high))
        self.cache = None
        if pending.num_rows:
            kept.append(arrow_segments.write(self.store, name, pending))
            self.cache = (name, pending)
        if by_spark:
            self._step(report.batch_id, "release (Spark)")
            events, txns, dead = self._release(report.batch_id, kept, name, window, 0)
            released = driver_release.Released([], events, txns, dead)
        high = state.released_ts if window.empty else window.high
        kept, garbage = self._prune(kept, high, report)
        report.timings["release"] = time.monotonic() - lap
        lap = time.monotonic()
        records = [*letters, *released.records]
        self._produce(records, window.high if not window.empty else None)
        report.timings["write"] = time.monotonic() - lap
        report.released_events = released.events
        report.released_txns = released.txns
        report.dead_letters = released.dead_letters + unreadable
        if not window.empty:
            state.released_ts = window.high
        report.resolved_ts = state.released_ts
        state.segments = kept
        state.garbage = garbage

    def _cached(self, segment: Segment) -> Any:
        """The rows of the segment this process wrote last (the steady state: most of what
        a batch releases was read by the batch before it), None for any other."""
        if self.cache is not None and self.cache[0] == segment.name:
            return self.cache[1]
        return None

    def _ts_counts(self, segment: Segment, window: Window) -> dict[int, int]:
        cached = self._cached(segment)
        if cached is None:
            return arrow_segments.ts_counts(self.store, segment, window)
        return driver_release.ts_counts(cached, window)

    def _window_rows(self, segment: Segment, window: Window) -> Any:
        """The data rows of ``segment`` that ``window`` releases (a table)."""
        cached = self._cached(segment)
        if cached is None:
            return arrow_segments.read(self.store, [segment], window)
        return cached.filter(driver_release.inside(cached, window))

    def _produce(self, records: list[driver_release.Record], resolved_ts: int | None) -> None:
        """``records`` in order (`.sorted` into its one partition), then the resolved mark;
        an error if any is not delivered (the batch fails and Spark runs it again)."""
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        for topic, key, value, hdrs in records:
            # `.sorted` has one partition; a dead letter goes where the partitioner says
            partition = 0 if topic == self.sorted_topic else ANY_PARTITION
            clients.produce_copy(self.producer, topic, value, key, partition, delivered, 0, hdrs)
        if resolved_ts is not None:
            self._resolved_mark(resolved_ts, flush=False)
        if self.producer.flush(60) != 0 or failed:
            raise RuntimeError(
                f"could not write {len(records)} released records: "
                f"{failed[0] if failed else 'not delivered in 60 s'}"
            )

    # -- the Spark path -----------------------------------------------------------------

    def _spark_batch(
        self, df: DataFrame, prev: DriverState, state: DriverState, report: BatchReport
    ) -> None:
        batch_id = report.batch_id
        self._step(batch_id, "segment")
        lap = time.monotonic()

        # 1. the batch's rows as a segment on disk, and its statistics observed by the
        # same Spark job (every Spark action costs 0.2-1 s here, whatever its size).
        name = f"seg-{batch_id:012d}"
        kind, ts = F.col("kind"), F.col("commit_ts")
        low = prev.released_ts
        seen = Observation(f"segment-{batch_id}")
        observed = parse(df).observe(
            seen,
            F.count(F.lit(1)).alias("rows"),
            F.count_if(kind == "data").alias("data"),
            F.count_if(kind == "bad").alias("bad"),
            F.count_if((kind == "data") & (ts <= F.lit(low))).alias("late"),
            F.max(F.when(kind == "data", ts)).alias("max_data_ts"),
            # One entry per mark: marks are few (a source partition's commits, ~10/s).
            F.collect_list(F.when(kind == "mark", F.struct("part", ts))).alias("marks"),
        )
        # Dictionary encoding of keys and values only cost CPU (hash maps of unique bytes).
        observed.write.mode("overwrite").option("parquet.enable.dictionary", "false").parquet(
            self.store.segment_path(name)
        )
        stats = observed_metrics(seen, f"batch {batch_id}'s segment")
        marks = rules.max_marks((m["part"], int(m["commit_ts"])) for m in stats["marks"])
        data_rows = int(stats["data"])
        bad_rows = int(stats["bad"]) + int(stats["late"])
        report.rows = int(stats["rows"])
        report.marks = len(stats["marks"])
        report.timings["segment"] = time.monotonic() - lap
        lap = time.monotonic()

        # 2. resolved state and R
        window = self._advance(state, marks)
        high = window.high
        segments = list(prev.segments)
        garbage: list[str] = []
        if data_rows:
            segments.append(Segment(name, int(stats["max_data_ts"]), data_rows))
        else:
            garbage.append(name)

        # 3. release (and dead letters)
        if not window.empty or bad_rows:
            self._step(batch_id, "release")
            released = segments if not window.empty else []
            (
                report.released_events,
                report.released_txns,
                report.dead_letters,
            ) = self._release(batch_id, released, name, window, bad_rows)
            report.timings["release"] = time.monotonic() - lap
            lap = time.monotonic()
        if not window.empty:
            self._step(batch_id, "resolved mark")
            self._resolved_mark(high)
            state.released_ts = high
        report.resolved_ts = state.released_ts

        # 4. segments no longer needed; compaction while R is held back
        kept, dropped = self._prune(segments, state.released_ts, report)
        garbage += dropped
        if report.compacted:
            report.timings["compact"] = time.monotonic() - lap
        state.segments = kept
        state.garbage = garbage

    def _prune(
        self, segments: list[Segment], resolved_ts: int, report: BatchReport
    ) -> tuple[list[Segment], list[str]]:
        """(kept, garbage): segments with nothing above R go; too many are compacted."""
        kept, dropped = rules.prune(segments, resolved_ts)
        garbage = [s.name for s in dropped]
        if rules.should_compact(kept, self.max_segments):
            merged = self._compact(kept, report.batch_id, resolved_ts)
            garbage += [s.name for s in kept]
            kept = [merged] if merged.rows else []
            if not merged.rows:
                garbage.append(merged.name)
            report.compacted = True
        return kept, garbage

    def _release(
        self, batch_id: int, segments: list[Segment], new: str, window: Window, bad_rows: int
    ) -> tuple[int, int, int]:
        """One Spark job, one Kafka write: released transactions in order into `.sorted`,
        dead letters into the DLQ. Returns (events, transactions, dead letters), observed
        on the rows written."""
        kind, ts = F.col("kind"), F.col("commit_ts")
        parts: list[DataFrame] = []
        if segments:
            pending = self.spark.read.parquet(*(self.store.segment_path(s.name) for s in segments))
            rel = pending.filter(
                (kind == "data") & (ts > F.lit(window.low)) & (ts <= F.lit(window.high))
            )
            # The one shuffle: everything released into one partition, sorted there (with
            # spill). The window per transaction and the explode keep that order, so the
            # rows reach the writer as (commit_ts, txn, ord) with no second sort.
            ordered = rel.repartition(1).sortWithinPartitions("commit_ts", "txn_id", "seq")
            parts.append(self._transactions(self._completeness(ordered), window))
        if bad_rows:
            fresh = self.spark.read.parquet(self.store.segment_path(new))
            late = fresh.filter((kind == "bad") | ((kind == "data") & (ts <= F.lit(window.low))))
            parts.append(
                late.select(
                    self._dead_letter(
                        F.when(kind == "bad", F.lit("UnreadableChange")).otherwise(
                            F.lit("LateChange")
                        ),
                        F.when(kind == "bad", F.col("error")).otherwise(
                            F.concat(
                                F.lit("commit_ts "),
                                ts.cast("string"),
                                F.lit(f" arrived after the feed's resolved_ts {window.low}"),
                            )
                        ),
                    ).alias("o")
                ).select("o.*")
            )
        if not parts:
            return 0, 0, 0
        out = parts[0]
        for extra in parts[1:]:
            out = out.unionByName(extra)
        written = Observation(f"release-{batch_id}")
        (
            out.observe(
                written,
                F.count_if(kind == "data").alias("events"),
                F.count_if(kind == headers.TYPE_COMMIT).alias("txns"),
                F.count_if(kind == "dlq").alias("dead_letters"),
            )
            .select("topic", "key", "value", "headers")
            .write.mode("append")
            .format("kafka")
            .options(**self.kafka_options)
            .options(**WRITER_DEFAULTS)
            .save()
        )
        counts = observed_metrics(written, f"batch {batch_id}'s release")
        return int(counts["events"]), int(counts["txns"]), int(counts["dead_letters"])

    @staticmethod
    def _completeness(rel: DataFrame) -> DataFrame:
        """``rel`` with ``ok`` (its transaction is complete: rules.complete_by_aggregates)
        and ``n`` (the transaction's changes in the window), by window aggregates over the
        transaction — (commit_ts, txn id): changes of one txn id at different commit_ts
        are different transactions, each incomplete. ``rel`` sorted by (commit_ts,
        txn_id, ...) in one partition needs no further shuffle or sort for it."""
        txn = SparkWindow.partitionBy("commit_ts", "txn_id")
        seq_d = F.col("seq").cast("decimal(38,0)")
        agg = rel.select(
            "*",
            F.count(F.lit(1)).over(txn).alias("n"),
            F.min("count").over(txn).alias("cmin"),
            F.max("count").over(txn).alias("cmax"),
            F.min("seq").over(txn).alias("smin"),
            F.max("seq").over(txn).alias("smax"),
            F.sum(seq_d).over(txn).alias("ssum"),
            F.sum(seq_d * seq_d).over(txn).alias("ssq"),
        )
        c = F.col("cmax").cast("decimal(38,0)")
        # One commit_ts per group by construction (min_ts == max_ts of the rule).
        ok = (
            (F.col("cmin") == F.col("cmax"))
            & (F.col("n") == F.col("cmax"))
            & (F.col("smin") == 1)
            & (F.col("smax") == F.col("cmax"))
            & (F.col("ssum") == c * (c + 1) / 2)
            & (F.col("ssq") == c * (c + 1) * (c * 2 + 1) / 6)
        )
        return agg.select(*rel.columns, ok.alias("ok"), "n")

    def _transactions(self, flagged: DataFrame, window: Window) -> DataFrame:
        """Rows of the release window, flagged by :meth:`_completeness` -> begin, data,
        commit rows (complete transactions) and dead letters (incomplete ones), in the
        order of ``flagged`` (begin before a transaction's seq 1, commit after its last)."""
        commit_ts = F.col("commit_ts")
        marker_headers = [
            _h(headers.COMMIT_TS, commit_ts.cast("string")),
            _h(headers.TXN, F.concat(F.col("txn_id"), F.lit("/0/"), F.col("count").cast("string"))),
        ]

        def marker(what: str, ord_: Column) -> Column:
            return self._row(
                self.sorted_topic,
                F.lit(None).cast("binary"),
                F.lit(None).cast("binary"),
                F.array(_h(headers.TYPE, what), *marker_headers),
                ord_,
                what,
            )

        data = self._row(
            self.sorted_topic,
            F.col("key"),
            F.col("value"),
            F.concat(
                F.col("headers"),
                F.array(_h(headers.TIMESTAMP, F.col("timestamp_ms").cast("string"))),
            ),
            F.col("seq").cast("long"),
            "data",
        )
        begin = F.when(F.col("seq") == 1, marker(headers.TYPE_BEGIN, F.lit(rules.BEGIN_ORD)))
        commit = F.when(
            F.col("seq") == F.col("count"),
            marker(headers.TYPE_COMMIT, (F.col("count") + 1).cast("long")),
        )
        letter = self._dead_letter(
            F.lit("IncompleteTransaction"),
            F.concat(
                F.lit("transaction "),
                F.col("txn_id"),
                F.lit(" has "),
                F.col("n").cast("string"),
                F.lit(" changes (seq/count not 1..count exactly once, or commit_ts differs) "),
                F.lit(f"when the feed's resolved_ts reached {window.high}"),
            ),
        )
        elements = F.when(
            F.col("ok"),
            F.filter(F.array(begin, data, commit), lambda x: x.isNotNull()),
        ).otherwise(F.array(letter))
        return flagged.select(F.explode(elements).alias("o")).select("o.*")

    def _row(
        self,
        topic: str,
        key: Column,
        value: Column,
        hdrs: Column,
        ord_: Column,
        kind: str,
    ) -> Column:
        return F.struct(
            F.lit(topic).alias("topic"),
            key.alias("key"),
            value.alias("value"),
            hdrs.alias("headers"),
            F.col("commit_ts").alias("commit_ts"),
            F.col("txn_id").alias("txn_id"),
            ord_.cast("long").alias("ord"),
            F.lit(kind).alias("kind"),
        )

    def _dead_letter(self, error_class: Column, message: Column) -> Column:
        context = F.array(
            _h(dlq.FEED, self.feed.name),
            _h(dlq.CLUSTER, F.col("src_cluster")),
            _h(dlq.TOPIC, F.col("src_topic")),
            _h(dlq.PARTITION, F.col("src_partition").cast("string")),
            _h(dlq.OFFSET, F.col("src_offset").cast("string")),
            _h(dlq.STAGE, "sorter"),
            _h(dlq.ERROR_CLASS, error_class),
            _h(dlq.ERROR_MESSAGE, message),
        )
        return self._row(
            topics.DLQ,
            F.col("key"),
            F.col("value"),
            F.concat(F.coalesce(F.col("headers"), F.array().cast(context_type())), context),
            F.lit(0).cast("long"),
            "dlq",
        )

    def _resolved_mark(self, resolved_ts: int, flush: bool = True) -> None:
        value = codec.encode(
            "ResolvedMark",
            {
                "source_cluster": self.source_cluster_id,
                "topic": "",
                "partition": -1,
                "resolved_ts_us": resolved_ts,
                "next_offset": -1,
            },
        )
        self.producer.produce(
            self.sorted_topic,
            partition=0,
            key=None,
            value=value,
            headers=[
                (headers.TYPE, headers.TYPE_RESOLVED.encode()),
                (headers.COMMIT_TS, str(resolved_ts).encode()),
            ],
        )
        if flush and self.producer.flush(30) != 0:
            raise RuntimeError(f"could not write the resolved mark {resolved_ts} in 30 s")

    def _compact(self, segments: list[Segment], batch_id: int, resolved_ts: int) -> Segment:
        name = f"merged-{batch_id:012d}"
        path = self.store.segment_path(name)
        pending = self.spark.read.parquet(*(self.store.segment_path(s.name) for s in segments))
        kind, ts = F.col("kind"), F.col("commit_ts")
        pending.filter((kind == "data") & (ts > F.lit(resolved_ts))).write.mode("overwrite").option(
            "parquet.enable.dictionary", "false"
        ).parquet(path)
        row = (
            self.spark.read.parquet(path)
            .agg(F.max("commit_ts").alias("max_ts"), F.count(F.lit(1)).alias("rows"))
            .collect()[0]
        )
        rows = int(row["rows"])
        max_ts = int(row["max_ts"]) if row["max_ts"] is not None else rules.NOTHING_RELEASED
        log.info("compacted %d pending segments into %s (%d changes)", len(segments), name, rows)
        return Segment(name, max_ts, rows)


OBSERVED_TIMEOUT_S = 120.0


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


def observed_metrics(observation: Observation, what: str) -> dict[str, Any]:
    """The metrics Spark observed during the action just run; an error, not a hang, if
    they never arrive (Observation.get waits forever: the batch fails and is replayed)."""
    out: list[dict[str, Any]] = []
    waiter = threading.Thread(target=lambda: out.append(observation.get), daemon=True)
    waiter.start()
    waiter.join(OBSERVED_TIMEOUT_S)
    if not out:
        raise RuntimeError(
            f"Spark reported no observed metrics for {what} in {OBSERVED_TIMEOUT_S:.0f} s"
        )
    return out[0]


def use_v2_kafka_writer(spark: SparkSession) -> None:
    """Write Kafka through Spark's DataSource V2 path: the V1 path (Spark's default for
    kafka) runs the write as a nested query whose observed metrics never reach
    Observation.get, which then waits forever."""
    key = "spark.sql.sources.useV1SourceList"
    sources = [s.strip() for s in (spark.conf.get(key) or "").split(",") if s.strip()]
    spark.conf.set(key, ",".join(s for s in sources if s.lower() != "kafka"))


def context_type() -> str:
    return "array<struct<key:string,value:binary>>"


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
    return spark
