"""What the sorter's micro-batches did: the summary /status shows, Spark's own account of
the newest batch, the batch counters, and the log lines (a warning, at most once a minute,
when batches take longer than the trigger interval allows)."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from crossfeed.services.sorter import metrics, rules
from crossfeed.services.sorter.report import BatchReport
from crossfeed.wire import topics

log = logging.getLogger(__name__)


def iso(ts_s: float | None) -> str | None:
    if ts_s is None:
        return None
    return datetime.fromtimestamp(ts_s, UTC).isoformat(timespec="milliseconds")


def summary(report: BatchReport) -> dict[str, Any]:
    """The batch as /status shows it (``last_batch``)."""
    return {
        "batch_id": report.batch_id,
        "rows": report.rows,
        "marks": report.marks,
        "engine": report.engine,
        "reason": report.reason,
        "released_events": report.released_events,
        "released_transactions": report.released_txns,
        "dead_letters": report.dead_letters,
        "seconds": round(report.seconds, 3),
        "timings": {k: round(v, 3) for k, v in report.timings.items()},
        "compacted": report.compacted,
        "at": iso(time.time()),
    }


class Progress:
    """Counts and logs each batch of one feed's sorter; keeps Spark's account of the newest."""

    def __init__(self, feed_name: str, trigger_interval_ms: int) -> None:
        self.trigger_interval_ms = trigger_interval_ms
        self.spark_progress: dict[str, Any] | None = None
        self._labels = (feed_name,)
        self._behind_warned_s = 0.0

    def count(self, report: BatchReport) -> None:
        metrics.BATCHES.labels(*self._labels).inc()
        metrics.INPUT.labels(*self._labels).inc(report.rows)
        metrics.EVENTS.labels(*self._labels).inc(report.released_events)
        metrics.TRANSACTIONS.labels(*self._labels).inc(report.released_txns)
        metrics.DLQ.labels(*self._labels).inc(report.dead_letters)
        metrics.BATCH_SECONDS.labels(*self._labels).observe(report.seconds)
        now = time.time()
        if rules.falls_behind(report.seconds, self.trigger_interval_ms) and (
            now - self._behind_warned_s >= 60
        ):
            self._behind_warned_s = now
            log.warning(
                "batch %d took %.1fs for %d records, more than %d trigger intervals of %d ms: "
                "the sorter falls behind its source (said at most once a minute)",
                report.batch_id,
                report.seconds,
                report.rows,
                rules.BEHIND_INTERVALS,
                self.trigger_interval_ms,
            )
        if report.dead_letters:
            log.warning(
                "batch %d: %d changes to %s", report.batch_id, report.dead_letters, topics.DLQ
            )
        log.info(
            "batch %d: %d records (%d marks), released %d changes in %d transactions, "
            "resolved_ts %d, %d pending in %d segments, %.2fs %s",
            report.batch_id,
            report.rows,
            report.marks,
            report.released_events,
            report.released_txns,
            report.resolved_ts,
            report.pending_rows,
            report.segments,
            report.seconds,
            {k: round(v, 2) for k, v in report.timings.items()},
        )

    def note_spark(self, query: Any) -> None:
        """Spark's own account of the newest micro-batch (where its time went: planning,
        offsets, the foreachBatch work, the commit log), in /status and the debug log."""
        try:
            progress = query.lastProgress
        except Exception:  # the JVM is going away
            return
        if not progress or progress.get("batchId") == (self.spark_progress or {}).get("batch_id"):
            return
        self.spark_progress = {
            "batch_id": progress.get("batchId"),
            "rows": progress.get("numInputRows"),
            "duration_ms": progress.get("durationMs", {}),
        }
        log.debug("Spark micro-batch %s", self.spark_progress)
