"""The sorter's decisions, with no Spark and no Kafka (docs/ordered-feeds.md §2-§3):
everything the driver decides once per micro-batch — per-partition resolved state, the
global resolved_ts R, which rows a batch releases, which engine releases them (and in what
parts), and which pending segments it may delete. The per-row rules (a row's headers read
by the grammar of crossfeed/wire/grammar.py, and whether a transaction is complete, rule
D) live where they are applied, Spark SQL in :mod:`crossfeed.services.sorter.spark_release`
and pyarrow in :mod:`crossfeed.services.sorter.driver_rows`; tests hold each to tables of
expected answers and the two to each other (tests/integration/test_sorter_parse.py).

Invariants:

A. A source partition's resolved_ts never goes backwards: merging an older mark is a no-op.
B. R (:func:`global_resolved`) is None while any expected source partition has no
   resolved_ts yet; otherwise the minimum over the expected partitions and every partition
   heard from. A partition not heard from holds the feed back; it is never skipped.
C. R never goes backwards (:func:`next_resolved`), so the release windows (R_prev, R] of
   consecutive batches never overlap: a change is released at most once per pass.
D. A transaction is released when R_prev < commit_ts <= R and it is complete: its rows
   are seq 1..count exactly once, all with one count and one commit_ts. A transaction in
   the window that is not complete never can be (R promises nothing older follows): its
   rows go to the dead-letter topic. A data row with commit_ts <= R_prev (late) or with
   unreadable headers also goes there, once, in the batch it arrives.
E. A segment of pending rows may be deleted once its newest commit_ts is <= R: every row
   in it was released or dead-lettered. Deletion is deferred one batch (see
   :class:`DriverState`), so a replayed batch still finds the segments it read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

NOTHING_RELEASED: Final = -1
"""R_prev before the first release: every commit_ts (>= 0) is above it."""


# -- per-batch rules (driver) ------------------------------------------------------------


def max_marks(marks: Iterable[tuple[str, int]]) -> dict[str, int]:
    """The newest resolved_ts per source partition among one batch's marks."""
    out: dict[str, int] = {}
    for key, ts in marks:
        if ts > out.get(key, NOTHING_RELEASED - 1):
            out[key] = ts
    return out


def merge_resolved(resolved: Mapping[str, int], marks: Mapping[str, int]) -> dict[str, int]:
    """Per-partition resolved_ts after a batch's marks (invariant A)."""
    merged = dict(resolved)
    for key, ts in marks.items():
        if ts > merged.get(key, NOTHING_RELEASED - 1):
            merged[key] = ts
    return merged


def forget_removed(
    resolved: Mapping[str, int], before: Iterable[str], now: Iterable[str]
) -> dict[str, int]:
    """Partitions the source listed before and lists no more (topic deleted) stop holding
    the feed back. A partition heard from but never listed (a topic newer than the last
    listing) is kept: forgetting it could raise R past changes it still has to deliver."""
    gone = set(before) - set(now)
    return {k: v for k, v in resolved.items() if k not in gone}


def global_resolved(resolved: Mapping[str, int], expected: Iterable[str]) -> int | None:
    """R: the minimum over every expected partition and every one heard from (invariant B)."""
    keys = set(expected) | set(resolved)
    if not keys or any(k not in resolved for k in keys):
        return None
    return min(resolved[k] for k in keys)


def next_resolved(previous: int, candidate: int | None) -> int:
    """R after this batch: never below the previous one (invariant C)."""
    return previous if candidate is None else max(previous, candidate)


def holding_back(resolved: Mapping[str, int], expected: Iterable[str]) -> list[str]:
    """The partitions R waits for: never heard from, or at the minimum resolved_ts."""
    keys = set(expected) | set(resolved)
    silent = sorted(k for k in keys if k not in resolved)
    if silent:
        return silent
    if not keys:
        return []
    low = min(resolved[k] for k in keys)
    return sorted(k for k in keys if resolved[k] == low)


BEHIND_INTERVALS: Final = 10
"""A micro-batch longer than this many trigger intervals (and than a second) falls behind."""


def falls_behind(seconds: float, trigger_interval_ms: int) -> bool:
    """A micro-batch that really falls behind its trigger: longer than BEHIND_INTERVALS
    intervals and than a second. (Spark's own warning fires for any batch longer than one
    interval: at 100 ms, nearly every batch with work in it.)"""
    return seconds > max(BEHIND_INTERVALS * trigger_interval_ms / 1000, 1.0)


def quiet_pause_s(
    changes: int, pending: int, resolved_ts: int, pause_ms: int, laggard_after_s: float
) -> float:
    """How long the sorter waits after a batch before the next may start (quiet.py): 0
    unless the batch read no change (marks alone), left none pending and R is known (a
    feed starting, still hearing from its partitions, reads on). At most half of
    ``laggard_after_s``: while the feed is quiet each partition's resolved_ts is seen to
    advance once a pause, and a partition not seen to for ``laggard_after_s`` is reported
    as a laggard."""
    if changes or pending or resolved_ts < 0 or pause_ms <= 0:
        return 0.0
    return min(pause_ms / 1000, laggard_after_s / 2)


@dataclass
class IdleWatch:
    """Whether the feed's source has gone quiet with nothing waiting (lag means changes
    waiting, not time since the last one): ``note`` after each batch, ``idle_since`` for
    the heartbeat.

    Quiet: no change read for ``after_s`` and nothing pending. ``since_us`` is then R as it
    stood when the last changes were all released — every change read is at or below it —
    so once a sink's checkpoint_ts reaches it the target holds everything the source sent.
    """

    after_s: float
    last_change_s: float
    since_us: int | None = None

    def note(self, changes: int, pending: int, resolved_ts: int, now_s: float) -> None:
        if changes:
            self.last_change_s = now_s
            self.since_us = None
        if pending:
            self.since_us = None
        elif self.since_us is None and resolved_ts >= 0:
            self.since_us = resolved_ts

    def idle_since(self, now_s: float) -> int:
        """``since_us`` once quiet for ``after_s``, else 0 (changes wait, or arrived lately)."""
        if self.since_us is None or now_s - self.last_change_s < self.after_s:
            return 0
        return self.since_us


@dataclass(frozen=True)
class Laggard:
    partition: str  # "topic/partition"
    resolved_ts_us: int | None  # None: never heard from
    since_s: float  # wall clock (epoch seconds) of its last advance, or of when it was expected


def laggards(
    resolved: Mapping[str, int],
    expected: Iterable[str],
    advanced_at: Mapping[str, float],
    now_s: float,
    after_s: float,
) -> list[Laggard]:
    """Partitions holding R back whose resolved_ts has not moved for ``after_s`` or more.

    ``advanced_at`` holds, per partition, when its resolved_ts last went up (or when it
    first became expected): a partition idle at the source still advances (producer
    watermarks or the puller's clock), so one that does not has stopped sending marks.
    """
    out = []
    for key in holding_back(resolved, expected):
        since = advanced_at.get(key, now_s)
        if now_s - since >= after_s:
            out.append(Laggard(key, resolved.get(key), since))
    return out


def advance_times(
    before: Mapping[str, int],
    after: Mapping[str, int],
    expected: Iterable[str],
    advanced_at: Mapping[str, float],
    now_s: float,
) -> dict[str, float]:
    """``advanced_at`` after a batch: now for partitions whose resolved_ts went up, and for
    partitions seen (expected or heard) for the first time."""
    out = dict(advanced_at)
    for key in set(expected) | set(after):
        if key not in out or after.get(key, -2) > before.get(key, -2):
            out[key] = now_s
    return out


@dataclass(frozen=True)
class Window:
    """What one batch releases: rows with prev_resolved_ts < commit_ts <= resolved_ts
    (rule D)."""

    prev_resolved_ts: int  # R_prev: the feed's global resolved_ts the last release reached
    resolved_ts: int  # R: the feed's global resolved_ts now

    @property
    def empty(self) -> bool:
        return self.resolved_ts <= self.prev_resolved_ts

    def releases(self, commit_ts: int) -> bool:
        return self.prev_resolved_ts < commit_ts <= self.resolved_ts

    def is_late(self, commit_ts: int) -> bool:
        """A change arriving at or below R_prev: its place in `.sorted` has passed."""
        return commit_ts <= self.prev_resolved_ts


def split(counts: Mapping[int, int], window: Window, limit: int) -> list[Window] | None:
    """``window`` as consecutive windows that each release at most ``limit`` changes,
    given how many changes each commit_ts holds; cut only between two commit_ts, so no
    transaction (one commit_ts) is split. None when one commit_ts alone holds more than
    ``limit``: that release needs Spark's sort."""
    parts: list[Window] = []
    low, held, last = window.prev_resolved_ts, 0, window.prev_resolved_ts
    for ts in sorted(t for t in counts if window.releases(t)):
        n = counts[ts]
        if n > limit:
            return None
        if held + n > limit:
            parts.append(Window(low, last))
            low, held = last, 0
        held += n
        last = ts
    parts.append(Window(low, window.resolved_ts))
    return parts


# -- which engine releases a batch -------------------------------------------------------


class Engine(StrEnum):
    DRIVER = "driver"  # services/sorter/driver_release.py
    SPARK = "spark"  # services/sorter/spark_release.py


class Reason(StrEnum):
    """Why a batch goes to the engine it goes to (BatchReport.reason, /status)."""

    FITS = "fits"  # the batch, and each commit_ts of its window, fit the driver
    DRIVER_OFF = "driver_off"  # sorter.driver_release_rows is 0
    AFTER_BIG_BATCH = "after_big_batch"  # the batch before was too big: not read into the driver
    BIG_BATCH = "big_batch"  # more rows than driver_release_rows
    BIG_COMMIT_TS = "big_commit_ts"  # a commit_ts of the window holds more than that


@dataclass(frozen=True)
class Choice:
    """The engine that releases a batch, why, and, for the driver, its window in parts."""

    engine: Engine
    reason: Reason
    parts: tuple[Window, ...] = ()


def driver_reads(limit: int, last_rows: int) -> Reason | None:
    """None when the driver reads the next batch (it may fit there), else why Spark
    reads, parses and releases it. A batch after one bigger than ``limit`` is likely big
    too: it goes to Spark at once, without a read into the driver first."""
    if limit <= 0:
        return Reason.DRIVER_OFF
    if last_rows > limit:
        return Reason.AFTER_BIG_BATCH
    return None


def choose(counts: Mapping[int, int], window: Window, limit: int) -> Choice:
    """The engine for a batch the driver read and parsed, given how many changes each
    commit_ts of ``window`` holds (pending and new): the driver, releasing the window in
    parts of at most ``limit`` changes (none for an empty window), unless one commit_ts
    alone holds more than ``limit`` — a transaction the driver must not hold, which
    Spark's external sort takes."""
    if window.empty:
        return Choice(Engine.DRIVER, Reason.FITS)
    parts = split(counts, window, limit)
    if parts is None:
        return Choice(Engine.SPARK, Reason.BIG_COMMIT_TS)
    return Choice(Engine.DRIVER, Reason.FITS, tuple(parts))


@dataclass(frozen=True)
class Segment:
    """One parquet file set of pending rows (a batch's rows, or a compaction of several)."""

    name: str
    max_ts: int  # newest commit_ts of a data row in it (NOTHING_RELEASED if none)
    rows: int

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "max_ts": self.max_ts, "rows": self.rows}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Segment:
        return cls(str(data["name"]), int(data["max_ts"]), int(data["rows"]))


def prune(segments: Iterable[Segment], resolved: int) -> tuple[list[Segment], list[Segment]]:
    """(kept, dropped): a segment whose newest row is <= R holds nothing pending (rule E)."""
    kept: list[Segment] = []
    dropped: list[Segment] = []
    for seg in segments:
        (dropped if seg.max_ts <= resolved else kept).append(seg)
    return kept, dropped


def should_compact(segments: Iterable[Segment], max_segments: int) -> bool:
    """Too many small segments (R held back for a long time): merge them into one."""
    return sum(1 for _ in segments) > max_segments


@dataclass
class DriverState:
    """What the driver keeps between micro-batches, saved once per batch id.

    A batch runs from the state saved by the batch before it, so a batch Spark replays
    after a crash computes the same release from the same inputs. ``garbage`` lists the
    segments this batch stopped using: the previous state still names them, so they are
    deleted only when the next batch starts (this batch is committed by then).
    """

    batch_id: int = -1
    resolved: dict[str, int] = field(default_factory=dict)
    expected: list[str] = field(default_factory=list)
    expected_at_s: float = 0.0
    advanced_at: dict[str, float] = field(default_factory=dict)
    resolved_ts: int = NOTHING_RELEASED  # R: the feed's global resolved_ts, released
    segments: list[Segment] = field(default_factory=list)
    garbage: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "resolved": dict(sorted(self.resolved.items())),
            "expected": sorted(self.expected),
            "expected_at_s": self.expected_at_s,
            "advanced_at": dict(sorted(self.advanced_at.items())),
            # the file's key predates the attribute's name: state files stay readable
            "released_ts": self.resolved_ts,
            "segments": [s.as_dict() for s in self.segments],
            "garbage": list(self.garbage),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DriverState:
        return cls(
            batch_id=int(data["batch_id"]),
            resolved={str(k): int(v) for k, v in data.get("resolved", {}).items()},
            expected=[str(k) for k in data.get("expected", [])],
            expected_at_s=float(data.get("expected_at_s", 0.0)),
            advanced_at={str(k): float(v) for k, v in data.get("advanced_at", {}).items()},
            resolved_ts=int(data.get("released_ts", NOTHING_RELEASED)),
            segments=[Segment.from_dict(s) for s in data.get("segments", [])],
            garbage=[str(g) for g in data.get("garbage", [])],
        )

    @property
    def pending_rows(self) -> int:
        return sum(s.rows for s in self.segments)
