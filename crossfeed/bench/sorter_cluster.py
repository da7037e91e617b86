"""The sorter in ``local[2]`` beside a standalone Spark cluster of one worker, on one backlog
(bench/README.md, "The sorter on a cluster").

    python -m crossfeed.bench.sorter_cluster --config .crossfeed/local.yaml
        [--masters local[2],standalone] [--transfers 30000] [--rate 250]
        [--lag-seconds 60] [--idle-seconds 40] [--repeat 1]

Against the clusters of ``--config`` (the first is the source, the control cluster the
target): per master and repetition, the bank workload writes the same backlog of
``--transfers`` transfers (seed 1) to a fresh topic, and a fresh ordered feed of it is
staged by two pullers (``.changes``, 4 partitions) before its sorter starts, so the
figures are the sorter's:

* **events/s** — the backlog's changes over the seconds of the micro-batches that
  released them (the sorter's batch reports; Spark's start-up not counted), and from the
  first to the last seen in ``.sorted`` by a read_committed reader;
* **lag** — the workload at ``--rate`` transfers/s (two changes each) for
  ``--lag-seconds`` through the running pullers and sorter: source commit_ts → visible in
  ``.sorted``, p50/p99;
* **idle batch** — then ``--idle-seconds`` of resolved marks alone: the sorter's batch
  reports (median, p90, the Kafka read's median);
* **CPU and RSS** — the driver (the sorter's process tree: in ``local[2]`` its executor
  threads are in its JVM) and, on the cluster, the executor (the worker's
  ``CoarseGrainedExecutorBackend``): CPU-seconds from the sorter's start to the backlog's
  last change (start-up included) and per second of the lag phase, peak RSS.

The standalone cluster (master and one worker of 1 core and 2 GiB, pyspark's
``bin/spark-class`` on 127.0.0.1) is started and stopped by the run. One JSON line per run,
then a summary with min/median over repetitions and the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from crossfeed.bench import jvm
from crossfeed.bench.cleanup import delete_topics, stop_process
from crossfeed.bench.measure import percentiles
from crossfeed.bench.sorter_idle import BATCH_LINE
from crossfeed.bench.spark_standalone import Standalone
from crossfeed.kafka import clients
from crossfeed.wire import headers
from crossfeed.wire import topics as wire_topics
from crossfeed.workload.run import run_bank

PARTITIONS = 8
ACCOUNTS = 1000
EXECUTOR = "CoarseGrainedExecutorBackend"


@dataclass
class SortedWatch:
    """Data records of `.sorted` as a read_committed reader sees them, and the lag of those
    with a commit_ts at or above ``lag_since_us`` (source commit_ts → seen here)."""

    conf: dict[str, Any]
    topic: str
    count: int = 0
    first_at: float | None = None
    last_at: float | None = None
    lag_since_us: int | None = None
    lags_ms: list[float] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> SortedWatch:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def _run(self) -> None:
        consumer = clients.consumer(
            self.conf, **{"group.id": f"bench-sorted-{uuid.uuid4().hex}", "fetch.wait.max.ms": 10}
        )
        consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        try:
            while not self._stop.is_set():
                batch = [m for m in consumer.consume(10_000, timeout=0.1) if not m.error()]
                now_us = time.time() * 1e6
                hdr_lists: list[Any] = [m.headers() or [] for m in batch]
                data = [h for h in hdr_lists if all(k != headers.TYPE for k, _ in h)]
                if not data:
                    continue
                if self.first_at is None:
                    self.first_at = time.monotonic()
                self.count += len(data)
                self.last_at = time.monotonic()
                if self.lag_since_us is not None:
                    for hdrs in data:
                        ts = int(dict(hdrs)[headers.COMMIT_TS] or b"0")
                        if ts >= self.lag_since_us:
                            self.lags_ms.append((now_us - ts) / 1000)
        finally:
            consumer.close()

    def wait_for(self, count: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while self.count < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.count >= count

    def stop(self) -> None:
        self._stop.set()


class Usage(threading.Thread):
    """CPU-seconds and RSS of the driver (a process tree) and of the Spark executors on
    this machine, sampled every half second."""

    def __init__(self, driver_pid: int) -> None:
        super().__init__(daemon=True)
        self.driver = psutil.Process(driver_pid)
        self.samples: list[tuple[float, float, float]] = []  # (when, driver, executor) CPU
        self.peak = {"driver": 0.0, "executor": 0.0}  # MiB
        self.stopping = threading.Event()
        self.seen: dict[int, psutil.Process] = {}

    def _executors(self) -> list[psutil.Process]:
        for proc in psutil.process_iter(["cmdline"]):
            if proc.pid not in self.seen and EXECUTOR in " ".join(proc.info["cmdline"] or []):
                self.seen[proc.pid] = proc
        return list(self.seen.values())

    def sample(self) -> None:
        cpu = {"driver": 0.0, "executor": 0.0}
        rss = {"driver": 0.0, "executor": 0.0}
        groups = {"driver": [self.driver, *self.driver.children(recursive=True)]}
        groups["executor"] = self._executors()
        for label, procs in groups.items():
            for proc in procs:
                with contextlib.suppress(psutil.Error):
                    times = proc.cpu_times()
                    cpu[label] += times.user + times.system
                    rss[label] += proc.memory_info().rss / 2**20
            self.peak[label] = max(self.peak[label], rss[label])
        self.samples.append((time.monotonic(), cpu["driver"], cpu["executor"]))

    def run(self) -> None:
        while not self.stopping.wait(0.5):
            with contextlib.suppress(psutil.Error):
                self.sample()

    def between(self, start: float, end: float) -> dict[str, float]:
        """CPU-seconds of each side between two moments (the nearest samples)."""

        def at(when: float) -> tuple[float, float, float]:
            return min(self.samples, key=lambda s: abs(s[0] - when))

        a, b = at(start), at(end)
        return {"driver": round(b[1] - a[1], 1), "executor": round(b[2] - a[2], 1)}


def _staged(conf: dict[str, Any], topic: str, at_least: int, timeout_s: float) -> None:
    """Until ``topic`` holds ``at_least`` records and grows by resolved marks alone (fewer
    than 200 records in 2 s: the pullers' marks never stop)."""
    consumer = clients.consumer(conf, **{"group.id": f"bench-{uuid.uuid4().hex}"})
    deadline, history = time.monotonic() + timeout_s, []
    try:
        while time.monotonic() < deadline:
            meta = consumer.list_topics(topic, timeout=5).topics.get(topic)
            total = 0
            for p in meta.partitions if meta is not None and meta.error is None else {}:
                total += consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1]
            history.append(total)
            if total >= at_least and len(history) > 4 and total - history[-5] < 200:
                return
            time.sleep(0.5)
    finally:
        consumer.close()
    raise RuntimeError(f"{topic} holds {history[-1:]} records, expected {at_least} or more")


MARKS_ONLY = re.compile(r"batch \d+: (\d+) records \((\d+) marks\), released 0 changes")


def _batch_lines(log: Path) -> list[re.Match[str]]:
    """The sorter's batch reports in its log."""
    found = (BATCH_LINE.search(line) for line in log.read_text(errors="replace").splitlines())
    return [m for m in found if m]


def _marks_only(report: re.Match[str]) -> bool:
    """A batch of resolved marks alone."""
    counts = MARKS_ONLY.search(report.string)
    return counts is not None and counts[1] == counts[2]


RELEASED = re.compile(r"released (\d+) changes")


def backlog_batches(log: Path, events: int) -> dict[str, Any]:
    """The micro-batches that released the backlog's ``events`` changes: how many, their
    seconds and the Kafka read's (Spark's start-up before the first is not counted), and
    events per second of them."""
    seconds = read = 0.0
    released = n = 0
    for report in _batch_lines(log):
        n += 1
        seconds += float(report[1])
        if found := re.search(r"'read': ([0-9.]+)", report[2]):
            read += float(found[1])
        counted = RELEASED.search(report.string)
        released += int(counted[1]) if counted else 0
        if released >= events:
            break
    return {
        "batches": n,
        "seconds": round(seconds, 2),
        "read_seconds": round(read, 2),
        "events_per_s": round(released / max(seconds, 1e-3), 1),
    }


def run_once(
    config: dict[str, Any], master: str, topic: str, events: int, args: argparse.Namespace
) -> dict[str, Any]:
    source, target = config["_source"], config["_target"]
    feed = f"bench-cluster-{uuid.uuid4().hex[:6]}"
    work = Path(tempfile.mkdtemp(prefix=f"sorter-cluster-{feed}-"))
    sorter: dict[str, Any] = {"checkpoint_dir": str(work / "checkpoints"), "spark_master": master}
    if master.startswith("spark://"):
        sorter["spark_conf"] = {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        }
    own = {k: v for k, v in config.items() if not k.startswith("_")}
    own.update({"sorter": {**config.get("sorter", {}), **sorter}, "log_level": "INFO"})
    (work / "crossfeed.yaml").write_text(yaml.safe_dump(own))
    spec = {
        "name": feed,
        "source": config["_source_alias"],
        "sink-uri": f"kafka://{config['_target_alias']}/{feed}-out",
        "mode": "ordered",
        "topics": [topic],
        "start": "earliest",
        "config": {"staging.partitions": 4},
    }
    (work / "feed.yaml").write_text(yaml.safe_dump(spec))
    changes, sorted_ = wire_topics.changes(feed), wire_topics.sorted_(feed)

    def spawn(role: str, label: str) -> subprocess.Popen[bytes]:
        cmd = [sys.executable, "-m", "crossfeed.cli.main", "--config", str(work / "crossfeed.yaml")]
        cmd += [role, "run", "--feed", feed, "--feed-file", str(work / "feed.yaml")]
        return jvm.spawn([*cmd, "--instance", f"{feed}-{label}"], work / f"{label}.log")

    procs = [spawn("puller", "puller-1"), spawn("puller", "puller-2")]
    out: dict[str, Any] = {"master": master, "events": events, "logs": str(work)}
    watch = SortedWatch(target, sorted_)
    try:
        _staged(target, changes, events, 900)
        watch.start()
        began = time.monotonic()
        sorter_proc = spawn("sorter", "sorter")
        procs.append(sorter_proc)
        usage = Usage(sorter_proc.pid)
        usage.start()
        if not watch.wait_for(events, 900):
            raise RuntimeError(f"{watch.count} of {events} released; logs in {work}")
        assert watch.first_at is not None and watch.last_at is not None
        span = max(watch.last_at - watch.first_at, 1e-3)
        out["events_per_s"] = round(events / span, 1)
        out["startup_s"] = round(watch.first_at - began, 1)
        out["release_cpu_s"] = usage.between(began, watch.last_at)
        out["backlog_batches"] = backlog_batches(work / "sorter.log", events)
        # lag at a steady rate
        time.sleep(5)
        watch.lag_since_us = int(time.time() * 1e6)
        lag_began = time.monotonic()
        summary, _ = run_bank(
            source, topic, accounts=ACCOUNTS, partitions=PARTITIONS, rate=args.rate,
            seconds=args.lag_seconds, build_ahead=True,
        )  # fmt: skip
        watch.wait_for(events + summary.events, 300)
        lag_ended = time.monotonic()
        lags = percentiles(watch.lags_ms)
        out["lag_ms"] = {k: None if v is None else round(v) for k, v in lags.items()}
        out["lag_offered_events_per_s"] = round(summary.events / max(summary.seconds, 1e-3), 1)
        cpu = usage.between(lag_began, lag_ended)
        out["lag_cpu_cores"] = {k: round(v / (lag_ended - lag_began), 2) for k, v in cpu.items()}
        # marks alone
        time.sleep(10)
        log = work / "sorter.log"
        seen = len(_batch_lines(log))
        time.sleep(args.idle_seconds)
        batches = [m for m in _batch_lines(log)[seen:] if _marks_only(m)]
        secs = sorted(float(m[1]) for m in batches)
        reads = [float(r[1]) for m in batches if (r := re.search(r"'read': ([0-9.]+)", m[2]))]
        out["idle_batches"] = len(secs)
        if secs:
            out["idle_batch_s"] = {
                "median": round(statistics.median(secs), 3),
                "p90": round(secs[int(0.9 * (len(secs) - 1))], 3),
                "read_median": round(statistics.median(reads), 3) if reads else None,
            }
        usage.sample()
        out["peak_rss_mib"] = {k: round(v) for k, v in usage.peak.items()}
        out["load"] = round(psutil.getloadavg()[0], 2)
        usage.stopping.set()
    finally:
        watch.stop()
        for proc in reversed(procs):
            stop_process(proc)
        delete_topics(target, [changes, sorted_, f"{feed}-out"])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--masters", default="local[2],standalone")
    ap.add_argument("--transfers", type=int, default=30_000)
    ap.add_argument("--rate", type=float, default=250.0, help="transfers/s in the lag phase")
    ap.add_argument("--lag-seconds", type=float, default=60)
    ap.add_argument("--idle-seconds", type=float, default=40)
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    # a SIGTERM stops the run through its finally blocks: the cluster and the processes
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    config = yaml.safe_load(Path(args.config).read_text())
    aliases = list(config["clusters"])
    config["_source_alias"] = aliases[0]
    config["_target_alias"] = config.get("control_cluster", aliases[0])
    config["_source"] = config["clusters"][aliases[0]]
    config["_target"] = config["clusters"][config["_target_alias"]]
    results: list[dict[str, Any]] = []
    cluster: Standalone | None = None
    try:
        for _ in range(args.repeat):
            for master in args.masters.split(","):
                if master == "standalone":
                    if cluster is None:
                        cluster = Standalone(Path(tempfile.mkdtemp(prefix="sorter-cluster-spark-")))
                        cluster.base.mkdir(parents=True, exist_ok=True)
                        cluster.start()
                    url = cluster.url
                else:
                    url = master
                # the same backlog for every run: a fresh topic, the same seed
                topic = f"bench-cluster-bank-{uuid.uuid4().hex[:6]}"
                summary, _ = run_bank(
                    config["_source"], topic, accounts=ACCOUNTS, partitions=PARTITIONS,
                    transactions=args.transfers, seed=1,
                )  # fmt: skip
                try:
                    result = run_once(config, url, topic, summary.events, args)
                finally:
                    delete_topics(config["_source"], [topic])
                result["master"] = master
                print(json.dumps(result), flush=True)
                results.append(result)
    finally:
        if cluster is not None:
            cluster.stop()
    for master in args.masters.split(","):
        mine = [r for r in results if r["master"] == master]
        if mine:
            print(f"{master}: " + json.dumps(spread(mine)))


def spread(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """min/median of each figure over the repetitions."""

    def mm(values: list[float]) -> str | None:
        return f"{min(values)}/{statistics.median(values)}" if values else None

    out: dict[str, Any] = {
        "runs": len(runs),
        "events_per_s": mm([r["backlog_batches"]["events_per_s"] for r in runs]),
    }
    out["lag_p50_ms"] = mm([r["lag_ms"]["p50"] for r in runs if r["lag_ms"]["p50"] is not None])
    out["lag_p99_ms"] = mm([r["lag_ms"]["p99"] for r in runs if r["lag_ms"]["p99"] is not None])
    out["idle_batch_median_s"] = mm(
        [r["idle_batch_s"]["median"] for r in runs if "idle_batch_s" in r]
    )
    out["load"] = [r["load"] for r in runs]
    return out


if __name__ == "__main__":
    main()
