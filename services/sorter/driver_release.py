"""The driver's release engine: a batch read into the driver as Arrow, parsed and
released with the column functions of driver_rows.py (no I/O there), written here with an
idempotent producer, pending rows read from and written to parquet segments with pyarrow.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer

from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.services.sorter import rules, segments
from crossfeed.services.sorter.driver_rows import (
    Record,
    WindowRecords,
    dead_letter,
    late,
    late_letter,
    parse,
    rows_of,
    window_records,
)
from crossfeed.services.sorter.report import BatchReport, BatchSteps
from crossfeed.services.sorter.rules import DriverState, Segment, Window, split
from crossfeed.services.sorter.segments import Store, inside, ts_counts

if TYPE_CHECKING:  # pyspark is imported where a Spark job runs
    from crossfeed.services.sorter.spark_release import SparkRelease


# -- the engine -----------------------------------------------------------------------------

ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner chooses

# The release's producer. A batch's records are produced in one go and then flushed
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


@dataclass
class DriverRelease:
    """A batch read into the driver as Arrow, released here with an idempotent producer.

    It holds at most ``limit`` changes of a release window at a time (a bigger window goes
    out in parts cut between commit_ts); a single commit_ts of more changes than that is
    sorted by ``spark`` (spark_release.SparkRelease.release) instead."""

    feed: FeedSpec
    store: Store
    producer: Producer
    sorted_topic: str
    limit: int
    spark: SparkRelease
    cache: tuple[str, pa.Table] | None = None  # the segment this process wrote last

    def batch(
        self,
        steps: BatchSteps,
        table: pa.Table,
        prev: DriverState,
        state: DriverState,
        report: BatchReport,
    ) -> None:
        """The batch's rows are in ``table``; parse, release and keep the rest pending
        here, with the rules and output of Spark's release."""
        steps.step(report.batch_id, "release")
        lap = time.monotonic()
        parsed = parse(table)
        kind = parsed.column("kind")
        marks = parsed.filter(pc.equal(kind, "mark"))
        report.rows = parsed.num_rows
        report.marks = marks.num_rows
        marked = zip(
            marks.column("part").to_pylist(), marks.column("commit_ts").to_pylist(), strict=True
        )
        window = steps.advance(state, rules.max_marks(marked))
        bad, too_late = pc.equal(kind, "bad"), late(parsed, window)
        letters = [
            late_letter(r, self.feed.name, window)
            if r.kind == "data"
            else dead_letter(r, self.feed.name, "UnreadableChange", r.error or "")
            for r in rows_of(parsed.filter(pc.or_(bad, too_late)))
        ]
        unreadable = len(letters)  # bad and late rows of this batch: dead letters
        pending = parsed.filter(pc.and_(pc.equal(kind, "data"), pc.invert(too_late)))
        name = f"seg-{report.batch_id:012d}"
        kept = list(prev.segments)
        released = WindowRecords()
        by_spark = False  # the window holds too many changes for the driver: Spark sorts it
        if not window.empty:
            counts: Counter[int] = Counter(ts_counts(pending, window))
            for segment in kept:
                counts.update(self._ts_counts(segment, window))
            # A window too big to hold is released in parts, a few commit_ts at a time.
            parts = split(counts, window, self.limit)
            if parts is None:
                by_spark = True  # one commit_ts holds more than the driver may
            else:
                self._produce(letters, None, steps)
                letters = []
                for part in parts:
                    rows_in = pa.concat_tables(
                        [
                            *(self._window_rows(s, part) for s in kept),
                            pending.filter(inside(pending, part)),
                        ]
                    )
                    done = window_records(rows_in, part, self.feed.name, window.resolved_ts)
                    self._produce(done.records, None, steps)
                    released.events += done.events
                    released.txns += done.txns
                    released.dead_letters += done.dead_letters
                pending = pending.filter(
                    pc.greater(pending.column("commit_ts"), window.resolved_ts)
                )
        self.cache = None
        if pending.num_rows:
            kept.append(segments.write(self.store, name, pending))
            self.cache = (name, pending)
        if by_spark:
            steps.step(report.batch_id, "release (Spark)")
            events, txns, dead = self.spark.release(report.batch_id, kept, name, window, 0)
            released = WindowRecords([], events, txns, dead)
        kept, garbage = steps.prune(kept, max(state.resolved_ts, window.resolved_ts), report)
        report.timings["release"] = time.monotonic() - lap
        lap = time.monotonic()
        records = [*letters, *released.records]
        self._produce(records, window.resolved_ts if not window.empty else None, steps)
        report.timings["write"] = time.monotonic() - lap
        report.released_events = released.events
        report.released_txns = released.txns
        report.dead_letters = released.dead_letters + unreadable
        if not window.empty:
            state.resolved_ts = window.resolved_ts
        report.resolved_ts = state.resolved_ts
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
            return segments.file_ts_counts(self.store, segment, window)
        return ts_counts(cached, window)

    def _window_rows(self, segment: Segment, window: Window) -> Any:
        """The data rows of ``segment`` that ``window`` releases (a table)."""
        cached = self._cached(segment)
        if cached is None:
            return segments.read(self.store, [segment], window)
        return cached.filter(inside(cached, window))

    def _produce(self, records: list[Record], resolved_ts: int | None, steps: BatchSteps) -> None:
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
            steps.resolved_mark(resolved_ts, flush=False)
        if self.producer.flush(60) != 0 or failed:
            raise RuntimeError(
                f"could not write {len(records)} released records: "
                f"{failed[0] if failed else 'not delivered in 60 s'}"
            )
