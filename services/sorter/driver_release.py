"""The driver's release engine: a batch parsed in the driver (driver_rows.py) released
with an idempotent producer, pending rows read from and written to parquet segments with
pyarrow.

The job (job.py) decides what the engine does, and it does only that: it counts the
changes per commit_ts of a window (:meth:`DriverRelease.ts_counts`, for the job's choice
of engine), and releases a batch (:meth:`DriverRelease.release`): the batch's dead letters,
then each part of the window it is given, from the pending segments and the batch's rows,
then the batch's rows above the window kept as a segment. It returns what it did; the
resolved mark, pruning and the state are the job's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer

from crossfeed.feeds import FeedSpec
from crossfeed.kafka import clients
from crossfeed.services.sorter import segments
from crossfeed.services.sorter.driver_rows import (
    Batch,
    Record,
    letters_and_pending,
    window_records,
)
from crossfeed.services.sorter.report import Released
from crossfeed.services.sorter.rules import Segment, Window
from crossfeed.services.sorter.segments import Store, inside, ts_counts

ANY_PARTITION = -1  # librdkafka's RD_KAFKA_PARTITION_UA: the partitioner chooses

# The release's producer. A batch's records are produced in one go and then flushed
# (which sends at once, whatever linger.ms): the producer batches them, and its queue holds
# a whole window part with its markers instead of making the loop wait for deliveries.
# Delivery reports for failures only: a report per record is a Python call per record
# while flush() waits — 100,000 records (50,000 changes of bank transfers with their
# markers) flushed in 0.19 s instead of 0.37 s here — and only a failure matters.
#
# Uncompressed: `.sorted` is written and read back on the same cluster at once (the sinks
# read it as it is written), so lz4 would cost the sorter, the broker (which decompresses every
# compressed batch to check its records) and the sink CPU per change to save bytes that
# never leave the cluster (Spark's engine writes uncompressed too: the Java client's
# default).
RELEASE_PRODUCER = {
    "compression.type": "none",
    "linger.ms": 20,
    "batch.size": 1 << 20,
    "queue.buffering.max.messages": 1_000_000,
    "delivery.report.only.error": True,
}


@dataclass
class DriverRelease:
    """Batches read into the driver as Arrow, released here with an idempotent producer.

    It holds one part of a release window at a time (the job cuts a big window into
    parts of at most ``sorter.driver_release_rows`` changes between commit_ts)."""

    feed: FeedSpec
    store: Store
    producer: Producer
    sorted_topic: str
    cache: tuple[str, pa.Table] | None = None  # the segment this process wrote last

    def ts_counts(self, window: Window, pending: list[Segment], batch: Batch) -> Counter[int]:
        """How many changes each commit_ts of ``window`` holds, in the ``pending``
        segments (two columns read of each, but the one in memory) and in ``batch``."""
        counts: Counter[int] = Counter(ts_counts(batch.table, window))
        for segment in pending:
            counts.update(self._ts_counts(segment, window))
        return counts

    def release(
        self,
        batch_id: int,
        batch: Batch,
        window: Window,
        parts: Sequence[Window],
        pending: list[Segment],
    ) -> Released:
        """``batch``'s unreadable and late rows (at or below R_prev of ``window``) to the
        DLQ; then each of ``parts`` — consecutive windows from R_prev, cut between two
        commit_ts — from the ``pending`` segments and the batch's rows, in order; every
        record flushed before the next part (an error if one is not delivered: the batch
        fails and Spark runs it again). The batch's rows above the last part (all of them
        with no part: nothing is released here) are kept as its segment."""
        letters, rows = letters_and_pending(batch, window, self.feed.name)
        self._produce(letters)
        released = Released(dead_letters=len(letters), segments=list(pending))
        for part in parts:
            rows_in = pa.concat_tables(
                [*(self._window_rows(s, part) for s in pending), rows.filter(inside(rows, part))]
            )
            done = window_records(rows_in, part, self.feed.name, window.resolved_ts)
            self._produce(done.records)
            released.events += done.events
            released.txns += done.txns
            released.dead_letters += done.dead_letters
        if parts:
            rows = rows.filter(pc.greater(rows.column("commit_ts"), parts[-1].resolved_ts))
        self.cache = None
        if rows.num_rows:
            name = segments.batch_segment(batch_id)
            released.segments.append(segments.write(self.store, name, rows))
            self.cache = (name, rows)
        return released

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

    def _produce(self, records: list[Record]) -> None:
        """``records`` in order (`.sorted` into its one partition), flushed; an error if
        any is not delivered (the batch fails and Spark runs it again)."""
        if not records:
            return
        failed: list[str] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                failed.append(str(err))

        for topic, key, value, hdrs in records:
            # `.sorted` has one partition; a dead letter goes where the partitioner says
            partition = 0 if topic == self.sorted_topic else ANY_PARTITION
            clients.produce_copy(self.producer, topic, value, key, partition, delivered, 0, hdrs)
        if self.producer.flush(60) != 0 or failed:
            raise RuntimeError(
                f"could not write {len(records)} released records: "
                f"{failed[0] if failed else 'not delivered in 60 s'}"
            )
