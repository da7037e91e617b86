"""What a micro-batch did, and the feed's expected source partitions: the sorter's plain
data, shared by the Spark job (job.py) and the service around it (worker.py) without
importing pyspark."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol

from crossfeed.services.sorter import rules
from crossfeed.services.sorter.rules import DriverState, Segment, Window


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


class BatchSteps(Protocol):
    """The job's skeleton as a release engine sees it (job.SorterJob): the steps every
    batch takes whichever engine releases it."""

    def step(self, batch_id: int, step: str | None) -> None: ...

    def advance(self, state: DriverState, marks: dict[str, int]) -> Window: ...

    def prune(
        self, segments: list[Segment], resolved_ts: int, report: BatchReport
    ) -> tuple[list[Segment], list[str]]: ...

    def resolved_mark(self, resolved_ts: int, flush: bool = True) -> None: ...
