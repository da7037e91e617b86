"""Measuring tools shared by the benchmark scenarios: load, counting, lag, process cost."""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psutil
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from crossfeed.kafka import clients


def produce_backlog(conf: dict[str, Any], topic: str, records: int, size: int) -> float:
    """Write ``records`` values of ``size`` bytes as fast as the producer can; seconds taken."""
    producer = clients.producer(
        conf,
        **{
            "enable.idempotence": False,
            "linger.ms": 20,
            "batch.size": 1 << 20,
            "queue.buffering.max.messages": 1_000_000,
            "queue.buffering.max.kbytes": 1 << 20,
        },
    )
    value = b"x" * size
    started = time.monotonic()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value=value, key=str(i).encode())
                break
            except BufferError:
                producer.poll(0.01)
    producer.flush(120)
    return time.monotonic() - started


def produce_steady(
    conf: dict[str, Any], topic: str, rate: float, seconds: float, size: int, stop: threading.Event
) -> int:
    """Write ``rate`` records/s for ``seconds``, each stamped with its send time; count sent."""
    producer = clients.producer(conf, **{"linger.ms": 1, "enable.idempotence": False})
    value = b"y" * size
    started = time.monotonic()
    sent = 0
    while not stop.is_set():
        elapsed = time.monotonic() - started
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while sent < due:
            producer.produce(topic, value=value, timestamp=int(time.time() * 1000))
            sent += 1
        producer.poll(0)
        time.sleep(0.002)
    producer.flush(60)
    return sent


@dataclass
class TargetWatch:
    """Counts records visible (read_committed) on the target, and their end-to-end lag."""

    conf: dict[str, Any]
    topic: str
    partitions: int
    count: int = 0
    lags_ms: list[float] = field(default_factory=list)
    record_lag: bool = False
    first_at: float | None = None
    last_at: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TargetWatch:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def _loop(self) -> None:
        consumer = clients.consumer(
            self.conf, **{"group.id": f"crossfeed-bench-{time.time_ns()}", "fetch.wait.max.ms": 10}
        )
        deadline = time.monotonic() + 120
        while not self._stop.is_set() and time.monotonic() < deadline:
            meta = consumer.list_topics(self.topic, timeout=5).topics.get(self.topic)
            if meta is not None and meta.error is None and len(meta.partitions) >= self.partitions:
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
            if good and self.first_at is None:
                self.first_at = time.monotonic()
            if self.record_lag:
                self.lags_ms.extend(now_ms - m.timestamp()[1] for m in good)
            self.count += len(good)
            self.last_at = time.monotonic()
        consumer.close()

    def wait_for(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.count >= count:
                return True
            time.sleep(0.05)
        return False

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    ordered = sorted(values)
    return {
        "p50": ordered[len(ordered) // 2],
        "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
        "max": ordered[-1],
    }


def spread(values: list[float]) -> dict[str, float]:
    """min/median/max over repetitions."""
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


class ProcessCost:
    """CPU seconds and peak RSS of a set of processes (and their children), sampled."""

    def __init__(self, pids: list[int]) -> None:
        self.procs = [psutil.Process(pid) for pid in pids]
        self.peak_rss: dict[int, int] = {p.pid: 0 for p in self.procs}
        self.cpu_start = {p.pid: self._cpu(p) for p in self.procs}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @staticmethod
    def _cpu(proc: psutil.Process) -> float:
        try:
            times = proc.cpu_times()
            return float(times.user + times.system)
        except psutil.Error:
            return 0.0

    def _loop(self) -> None:
        while not self._stop.is_set():
            for proc in self.procs:
                with contextlib.suppress(psutil.Error):
                    self.peak_rss[proc.pid] = max(self.peak_rss[proc.pid], proc.memory_info().rss)
            self._stop.wait(0.2)

    def finish(self) -> dict[int, dict[str, float]]:
        self._stop.set()
        self._thread.join(timeout=5)
        return {
            p.pid: {
                "cpu_s": self._cpu(p) - self.cpu_start[p.pid],
                "peak_rss_mb": self.peak_rss[p.pid] / 2**20,
            }
            for p in self.procs
        }
