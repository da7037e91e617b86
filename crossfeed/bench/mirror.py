"""crossfeed's mirror path under load: throughput, cost, and end-to-end lag.

One run: create a source topic with a backlog of ``records`` values of ``size`` bytes,
start one puller and one sink (separate processes, as operators run them), and count
the records as they become visible on the target (read_committed). Then, with the feed
caught up, a steady load at ``lag_fraction`` of the measured rate on a second topic
gives the lag from each record's producer timestamp to its visibility on the target.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from crossfeed.bench.measure import (
    ProcessCost,
    TargetWatch,
    percentiles,
    produce_backlog,
    produce_steady,
)
from crossfeed.kafka import clients
from crossfeed.wire import topics as wire_topics


def _create(conf: dict[str, Any], names: list[str], partitions: int) -> None:
    admin = clients.admin(conf)
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names])
    for future in futures.values():
        future.result(timeout=60)


def _delete(conf: dict[str, Any], names: list[str]) -> None:
    admin = clients.admin(conf)
    for future in admin.delete_topics(names, operation_timeout=30).values():
        with contextlib.suppress(Exception):  # already gone, or never created
            future.result(timeout=60)


def _service(role: str, feed: str, feed_file: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "crossfeed.cli.main",
            role,
            "run",
            "--feed",
            feed,
            "--feed-file",
            str(feed_file),
        ],
        stdout=open(log, "wb"),
        stderr=subprocess.STDOUT,
    )


def run(
    source: dict[str, Any],
    target: dict[str, Any],
    *,
    records: int,
    size: int,
    partitions: int = 8,
    lag_fraction: float = 0.5,
    lag_seconds: float = 20.0,
) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    feed = f"bench-{run_id}"
    backlog_topic, lag_topic = f"bench-{run_id}-backlog", f"bench-{run_id}-steady"
    _create(source, [backlog_topic, lag_topic], partitions)
    produce_s = produce_backlog(source, backlog_topic, records, size)
    workdir = Path(tempfile.mkdtemp(prefix="crossfeed-bench-"))
    feed_file = workdir / "feed.yaml"
    feed_file.write_text(
        yaml.safe_dump(
            {
                "name": feed,
                "source": "dc-a",
                "sink-uri": "kafka://dc-b",
                "topics": [backlog_topic, lag_topic],
            }
        )
    )
    watch = TargetWatch(target, backlog_topic, partitions).start()
    started = time.monotonic()
    procs = [
        _service("puller", feed, feed_file, workdir / "puller.log"),
        _service("sink", feed, feed_file, workdir / "sink.log"),
    ]
    cost = ProcessCost([p.pid for p in procs])
    try:
        done = watch.wait_for(records, timeout_s=max(120.0, records / 2000))
        watch.stop()
        if not done:
            raise RuntimeError(
                f"only {watch.count} of {records} records reached the target; logs in {workdir}"
            )
        costs = cost.finish()
        assert watch.first_at is not None and watch.last_at is not None
        steady_s = max(watch.last_at - watch.first_at, 1e-3)
        rate = records / steady_s
        lag = _lag(source, target, lag_topic, partitions, rate * lag_fraction, lag_seconds, size)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        _delete(source, [backlog_topic, lag_topic])
        _delete(target, [backlog_topic, lag_topic, wire_topics.changes(feed)])
    cpu_s = sum(c["cpu_s"] for c in costs.values())
    return {
        "system": "crossfeed",
        "records": records,
        "record_bytes": size,
        "partitions": partitions,
        "produce_backlog_s": produce_s,
        "elapsed_with_startup_s": (watch.last_at or started) - started,
        "records_per_s": rate,
        "mb_per_s": rate * size / 1e6,
        "cpu_s_per_million": cpu_s / records * 1e6,
        "processes": {
            "puller": costs[procs[0].pid],
            "sink": costs[procs[1].pid],
        },
        "lag": lag,
        "logs": str(workdir),
    }


def _lag(
    source: dict[str, Any],
    target: dict[str, Any],
    topic: str,
    partitions: int,
    rate: float,
    seconds: float,
    size: int,
) -> dict[str, float]:
    watch = TargetWatch(target, topic, partitions, record_lag=True).start()
    stop = threading.Event()
    sent = produce_steady(source, topic, rate, seconds, size, stop)
    watch.wait_for(sent, timeout_s=60)
    watch.stop()
    return {
        "rate_per_s": rate,
        "sent": sent,
        "seen": watch.count,
        **{f"{k}_ms": v for k, v in percentiles(watch.lags_ms).items()},
    }
