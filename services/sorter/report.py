"""What a micro-batch did, and the feed's expected source partitions: the sorter's plain
data, shared by the Spark job (job.py), its release engines and the service around it
(worker.py) without importing pyspark."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from crossfeed.services.sorter import rules
from crossfeed.services.sorter.rules import Segment


@dataclass
class BatchReport:
    """What one micro-batch did (for metrics, /status and logs)."""

    batch_id: int
    rows: int = 0
    marks: int = 0
    engine: str = ""  # rules.Engine: who released the batch
    reason: str = ""  # rules.Reason: why that engine
    released_events: int = 0
    released_txns: int = 0
    dead_letters: int = 0
    resolved_ts: int = rules.NOTHING_RELEASED
    seconds: float = 0.0
    pending_rows: int = 0
    segments: int = 0
    compacted: bool = False
    timings: dict[str, float] = field(default_factory=dict)


@dataclass
class Released:
    """What a release engine did with a batch (driver_release.DriverRelease.release,
    spark_release.SparkRelease.release): the changes and transactions it wrote to
    `.sorted`, the rows it wrote to the DLQ, every record flushed; the pending segments
    after it (the ones it was given, and the batch's own if it keeps one), not yet pruned;
    and the segments it wrote that nothing needs after this batch (deleted a batch later)."""

    events: int = 0
    txns: int = 0
    dead_letters: int = 0
    segments: list[Segment] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)


class PartitionsSource:
    """The feed's expected source partitions; set from outside (a refresher thread)."""

    def __init__(self) -> None:
        self.keys: frozenset[str] | None = None
        self.at_s = 0.0

    def set(self, keys: frozenset[str]) -> None:
        self.keys, self.at_s = keys, time.time()
