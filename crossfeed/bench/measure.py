"""Measuring tools shared by the benchmark scenarios: counting, lag, process cost."""

from __future__ import annotations

import bisect
import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
from confluent_kafka import OFFSET_BEGINNING, TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from crossfeed.kafka import clients
from crossfeed.local import stack


def create_topics(conf: dict[str, Any], names: list[str], partitions: int) -> None:
    admin = clients.admin(conf)
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result(timeout=60)


@dataclass
class TargetWatch:
    """Counts records visible (read_committed) on the target, and their end-to-end lag
    (from each record's producer timestamp to the moment this reader sees it)."""

    conf: dict[str, Any]
    topic: str
    partitions: int
    count: int = 0
    lags_ms: list[float] = field(default_factory=list)
    record_lag: bool = False
    lag_since_ms: float = 0.0
    """Only records stamped at or after this (epoch ms) count for the lag (warm-up)."""
    on_first: Callable[[], None] | None = None
    first_at: float | None = None
    last_at: float | None = None
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TargetWatch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as err:  # reported by wait_for's caller
            self.error = f"{type(err).__name__}: {err}"

    def _loop(self) -> None:
        consumer = clients.consumer(
            self.conf,
            **{
                "group.id": f"crossfeed-bench-watch-{time.time_ns()}",
                "fetch.wait.max.ms": 10,
                "enable.partition.eof": False,
            },
        )
        try:
            deadline = time.monotonic() + 180
            while not self._stop.is_set() and time.monotonic() < deadline:
                meta = consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
                if (
                    meta is not None
                    and meta.error is None
                    and len(meta.partitions) >= self.partitions
                ):
                    break
                time.sleep(0.2)
            consumer.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)]
            )
            while not self._stop.is_set():
                batch = consumer.consume(10_000, timeout=0.1)
                if not batch:
                    continue
                now_ms = time.time() * 1000
                good = [m for m in batch if not m.error()]
                if not good:
                    continue
                if self.first_at is None:
                    self.first_at = time.monotonic()
                    if self.on_first is not None:
                        self.on_first()
                if self.record_lag:
                    since = self.lag_since_ms
                    stamps = (m.timestamp()[1] for m in good)
                    self.lags_ms.extend(now_ms - ts for ts in stamps if ts >= since)
                self.count += len(good)
                self.last_at = time.monotonic()
        finally:
            consumer.close()

    def wait_for(self, count: int, timeout_s: float, idle_s: float | None = None) -> bool:
        """True once ``count`` records were seen; False after ``timeout_s``, or after
        ``idle_s`` with no new record once the first arrived."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.error is None:
            if self.count >= count:
                return True
            if idle_s and self.last_at and time.monotonic() - self.last_at > idle_s:
                return False
            time.sleep(0.05)
        return self.count >= count

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=15)


def rounded(figures: dict[str, float | None]) -> dict[str, float | None]:
    """:func:`percentiles`' figures to 0.1 (ms), None kept."""
    return {k: None if v is None else round(v, 1) for k, v in figures.items()}


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p99": None, "max": None}
    ordered = sorted(values)
    return {
        "p50": ordered[len(ordered) // 2],
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max": ordered[-1],
    }


def spread(values: list[float]) -> dict[str, float]:
    """min/median/max over repetitions."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _cpu(proc: psutil.Process) -> float | None:
    try:
        times = proc.cpu_times()
        return float(times.user + times.system)
    except psutil.Error:
        return None


def broker_pids() -> dict[str, int]:
    """The local stack's running brokers by node ("dc-a", "dc-b"): their process ids."""
    return {n: pid for n in ("dc-a", "dc-b") if (pid := stack.node(n).pid())}


def broker_labels(brokers: dict[str, int]) -> dict[str, int]:
    """``broker_pids`` labelled as the result files name them ("dc-a broker")."""
    return {f"{n} broker": pid for n, pid in brokers.items()}


class ProcessCost:
    """CPU seconds and peak RSS of labelled processes, sampled every ``interval_s`` so the
    CPU spent in any window of the run (e.g. first to last record) can be read back.

    ``tree``: each label counts its process and its descendants (the sorter's Spark JVM,
    a database server's backends), those that exited included."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.2, tree: bool = False) -> None:
        self.procs = {label: psutil.Process(pid) for label, pid in pids.items()}
        self.peak_rss = dict.fromkeys(self.procs, 0)
        self.interval_s = interval_s
        self.tree = tree
        self.times: list[float] = []
        self.cpu: list[dict[str, float]] = []
        self._last: dict[str, float] = {}
        self._stop = threading.Event()
        self._sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        now = time.monotonic()
        row: dict[str, float] = {}
        for label, proc in self.procs.items():
            cpu = self._tree(proc) if self.tree else _cpu(proc)
            # A process that is gone keeps its last reading.
            row[label] = cpu if cpu is not None else self._last.get(label, 0.0)
            with contextlib.suppress(psutil.Error):
                self.peak_rss[label] = max(self.peak_rss[label], proc.memory_info().rss)
        self._last = row
        self.times.append(now)
        self.cpu.append(row)

    def _tree(self, proc: psutil.Process) -> float | None:
        """CPU seconds of ``proc`` and its descendants: each live one's own, plus what
        the children each waited for used (a database backend that exited), so a child
        that exits keeps counting."""
        try:
            family = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return None
        total = 0.0
        for member in family:
            with contextlib.suppress(psutil.Error):
                t = member.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        # The kernel counts in clock ticks (10 ms); a child's time moving from its own
        # counters to its parent's as it exits must not read as a drop of 1e-17 s from
        # summing the same floats in another order.
        return round(total, 6)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def cpu_at(self, when: float) -> dict[str, float]:
        """CPU seconds of each process at monotonic time ``when`` (interpolated)."""
        i = bisect.bisect_left(self.times, when)
        if i <= 0:
            return dict(self.cpu[0])
        if i >= len(self.times):
            return dict(self.cpu[-1])
        t0, t1 = self.times[i - 1], self.times[i]
        w = (when - t0) / (t1 - t0) if t1 > t0 else 1.0
        a, b = self.cpu[i - 1], self.cpu[i]
        return {k: a[k] + (b[k] - a[k]) * w for k in a}

    def stop(self) -> None:
        """Stop sampling (what :meth:`finish` does first; for a run that failed)."""
        self._stop.set()

    def finish(self, window: tuple[float, float] | None = None) -> dict[str, dict[str, float]]:
        """Per process: CPU seconds since start (``cpu_s``); if ``window`` is given, in it
        (``cpu_window_s``) and from start to its end (``cpu_to_last_s``); peak RSS in MB."""
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()
        start, end = self.cpu[0], self.cpu[-1]
        inside = (self.cpu_at(window[0]), self.cpu_at(window[1])) if window else None
        out: dict[str, dict[str, float]] = {}
        for label in self.procs:
            row = {
                "cpu_s": end[label] - start[label],
                "peak_rss_mb": self.peak_rss[label] / 2**20,
            }
            if inside:
                row["cpu_window_s"] = inside[1][label] - inside[0][label]
                row["cpu_to_last_s"] = inside[1][label] - start[label]
            out[label] = row
        return out


class PeakRss(threading.Thread):
    """Peak RSS of each labelled process with all its children (MB), sampled."""

    def __init__(self, pids: dict[str, int], interval_s: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.procs = {label: psutil.Process(pid) for label, pid in pids.items()}
        self.peak = dict.fromkeys(self.procs, 0.0)
        self.stopping = threading.Event()
        self.interval_s = interval_s

    def run(self) -> None:
        while not self.stopping.wait(self.interval_s):
            for label, proc in self.procs.items():
                with contextlib.suppress(psutil.Error):
                    tree = [proc, *proc.children(recursive=True)]
                    rss = sum(p.memory_info().rss for p in tree if p.is_running())
                    self.peak[label] = max(self.peak[label], rss / 2**20)

    def finish(self) -> dict[str, float]:
        self.stopping.set()
        self.join(5)
        return {label: round(mb, 1) for label, mb in self.peak.items()}


# -- a quiet feed (feed_idle.py, and ordered.py after its lag phase) ----------------------

SETTLE_S = 5.0
"""After the last change arrived: the sorter's and the sink's last batches finish."""

PIPELINE = "feed"
"""The label of the feed's own processes summed (pullers, sorter, sink)."""


def idle_cores(pids: dict[str, int], seconds: float) -> dict[str, float]:
    """Cores each process of the feed (``pids``) and each broker used over ``seconds`` of
    a quiet source, and the feed's own total (``feed``: its processes, brokers left out,
    as they serve every feed)."""
    brokers = broker_labels(broker_pids())
    cost = ProcessCost({**pids, **brokers}, interval_s=1.0, tree=True)
    began = time.monotonic()
    time.sleep(seconds)
    ended = time.monotonic()
    spent = cost.finish((began, ended))
    cores = {label: round(c["cpu_window_s"] / (ended - began), 3) for label, c in spent.items()}
    cores[PIPELINE] = round(sum(cores[label] for label in pids), 3)
    return cores
