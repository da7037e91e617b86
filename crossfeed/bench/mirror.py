"""One replicator under load: throughput and cost on a backlog, then end-to-end lag.

The backlog (``records`` values already on dc-a) is copied by the replicator's own
processes while a reader counts the copies as they become visible on dc-b
(read_committed). Throughput is records / (last visible − first visible), so process
start-up does not count; it is reported apart (``elapsed_with_startup_s``). CPU per
million records is the CPU the replicator's processes spent from their start to the
last record, minus what the same processes spend starting up with nothing to copy
(:func:`startup_cost`, measured once per run: a JVM's start-up costs far more than a
Python process's, and is no cost per record) — but never less than the CPU they spent
while the records were arriving (a lower bound that needs no calibration; start-up
CPU varies from one start to the next on a busy machine).

Then, with the replicator caught up, ProducerPerformance writes a steady load at
``lag_fraction`` of the rate just measured to a second topic the replicator also copies;
the lag of a record is the time from its producer timestamp to the reader seeing it on
dc-b. The first ``LAG_WARMUP_S`` of the load are left out (JVM warm-up).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from crossfeed.bench import perf
from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.jvm import spawn
from crossfeed.bench.measure import ProcessCost, TargetWatch, create_topics, percentiles
from crossfeed.bench.systems import Replicator
from crossfeed.kafka import clients

LAG_WARMUP_S = 2.0


def run(
    system: Replicator,
    source: dict[str, Any],
    target: dict[str, Any],
    janitor: Janitor,
    *,
    backlog_topic: str,
    records: int,
    size: int,
    partitions: int,
    payloads: Path,
    workdir: Path,
    brokers: dict[str, int],
    startup_cpu: dict[str, float] | None = None,
    lag_fraction: float = 0.5,
    lag_seconds: float = 20.0,
) -> dict[str, Any]:
    lag_topic = f"{backlog_topic}-{system.name}-steady"
    create_topics(source, [lag_topic], partitions)
    janitor.topics(source, [lag_topic])
    janitor.topics(target, [backlog_topic, lag_topic])
    watch = TargetWatch(target, backlog_topic, partitions).start()
    started = time.monotonic()
    try:
        pids = system.start([backlog_topic, lag_topic])
        cost = ProcessCost({**pids, **brokers})
        # Several pullers: the first one up copied alone until the others took their
        # tasks; the rate is measured from then (the steady rate, not the handoff).
        settled_at = getattr(system, "settled_at", None)
        copied_before = watch.count
        done = watch.wait_for(records, timeout_s=max(300.0, records / 1000), idle_s=90)
        watch.stop()
        if not done:
            cost.finish()
            raise RuntimeError(
                f"{system.name}: only {watch.count:,} of {records:,} records reached the "
                f"target{f' ({watch.error})' if watch.error else ''}\n{system.log_tail()}"
            )
        assert watch.first_at is not None and watch.last_at is not None
        window = (watch.first_at, watch.last_at)
        costs = cost.finish(window)
        rate, seconds = backlog_rate(
            records, watch.first_at, watch.last_at, settled_at, copied_before
        )
        lag = steady_lag(
            source,
            target,
            janitor,
            topic=lag_topic,
            partitions=partitions,
            rate=rate * lag_fraction,
            seconds=lag_seconds,
            payloads=payloads,
            workdir=workdir,
        )
    finally:
        watch.stop()
        system.stop()
        janitor.drop_topics(target, [backlog_topic, lag_topic])
        janitor.drop_topics(source, [lag_topic])
    own = {label: costs[label] for label in pids}
    cpu_total = sum(c["cpu_to_last_s"] for c in own.values())
    cpu_window = sum(c["cpu_window_s"] for c in own.values())
    startup = sum((startup_cpu or {}).get(label, 0.0) for label in pids)
    cpu_work = max(cpu_total - startup, cpu_window)
    return {
        "system": system.name,
        "records": records,
        "record_bytes": size,
        "partitions": partitions,
        "records_per_s": rate,
        "mb_per_s": rate * size / 1e6,
        "seconds": seconds,
        "elapsed_with_startup_s": watch.last_at - started,
        "copies_seen": watch.count,
        "copied_before_settled": copied_before if settled_at is not None else None,
        "cpu_s_per_million": cpu_work / records * 1e6,
        "cpu_s_per_million_window": cpu_window / records * 1e6,
        "cpu_s_per_million_with_startup": cpu_total / records * 1e6,
        "peak_rss_mb_total": sum(c["peak_rss_mb"] for c in own.values()),
        "processes": own,
        "brokers": {label: costs[label] for label in brokers},
        "lag": lag,
    }


def backlog_rate(
    records: int,
    first_at: float,
    last_at: float,
    settled_at: float | None = None,
    copied_before: int = 0,
) -> tuple[float, float]:
    """(records/s, seconds) of a backlog copy seen from its first to its last copy on the
    target. With several pullers (``settled_at``: when their group settled, with
    ``copied_before`` copies seen by then) only what came after counts: the first puller
    up copies alone until the others take their tasks, and that handoff is not the
    steady rate. If most of the backlog was copied before that, the whole copy counts."""
    start, counted = first_at, records
    if settled_at is not None and copied_before < records // 2:
        start, counted = max(settled_at, first_at), records - copied_before
    seconds = max(last_at - start, 1e-3)
    return counted / seconds, seconds


def startup_cost(
    system: Replicator,
    source: dict[str, Any],
    target: dict[str, Any],
    janitor: Janitor,
    *,
    topic: str,
    partitions: int,
    idle_cores: float = 0.2,
) -> dict[str, Any]:
    """Start the replicator on an empty topic; once its copy of the topic exists on the
    target and its processes idle (under ``idle_cores`` for 2 s), the CPU they spent."""
    create_topics(source, [topic], partitions)
    janitor.topics(source, [topic])
    janitor.topics(target, [topic])
    admin = clients.admin(target)
    started = time.monotonic()
    try:
        pids = system.start([topic])
        cost = ProcessCost(pids)
        deadline = started + 180
        while topic not in admin.list_topics(timeout=10).topics:
            if time.monotonic() > deadline:
                cost.finish()
                raise RuntimeError(f"{system.name} did not start in 180s\n{system.log_tail()}")
            time.sleep(0.2)
        calm = 0
        while calm < 2 and time.monotonic() < deadline:
            before = sum(cost.cpu_at(time.monotonic()).values())
            time.sleep(1.0)
            used = sum(cost.cpu_at(time.monotonic()).values()) - before
            calm = calm + 1 if used < idle_cores else 0
        costs = cost.finish()
    finally:
        system.stop()
        janitor.drop_topics(target, [topic])
        janitor.drop_topics(source, [topic])
    return {
        "ready_s": time.monotonic() - started,
        "cpu_s": {label: c["cpu_s"] for label, c in costs.items()},
        "peak_rss_mb": {label: c["peak_rss_mb"] for label, c in costs.items()},
    }


def equal_rate_lag(
    system: Replicator,
    source: dict[str, Any],
    target: dict[str, Any],
    janitor: Janitor,
    *,
    topic: str,
    partitions: int,
    rate: float,
    seconds: float,
    payloads: Path,
    workdir: Path,
) -> dict[str, Any]:
    """The lag of ``system`` at an offered ``rate`` every replicator of the run gets (the
    lag phase of :func:`run` offers each one half of its own capacity instead). Started
    on a fresh topic, once a probe record made it across."""
    create_topics(source, [topic], partitions)
    janitor.topics(source, [topic])
    janitor.topics(target, [topic])
    try:
        system.start([topic])
        probe = TargetWatch(target, topic, partitions).start()
        try:
            producer = clients.producer(source)
            producer.produce(topic, value=b"probe", partition=0)
            producer.flush(30)
            if not probe.wait_for(1, timeout_s=180):
                raise RuntimeError(f"{system.name} copied nothing in 180 s\n{system.log_tail()}")
        finally:
            probe.stop()
        return steady_lag(
            source,
            target,
            janitor,
            topic=topic,
            partitions=partitions,
            rate=rate,
            seconds=seconds,
            payloads=payloads,
            workdir=workdir,
        )
    finally:
        system.stop()
        janitor.drop_topics(target, [topic])
        janitor.drop_topics(source, [topic])


def steady_lag(
    source: dict[str, Any],
    target: dict[str, Any],
    janitor: Janitor,
    *,
    topic: str,
    partitions: int,
    rate: float,
    seconds: float,
    payloads: Path,
    workdir: Path,
) -> dict[str, Any]:
    total = max(1, int(rate * seconds))
    watch = TargetWatch(target, topic, partitions, record_lag=True)
    watch.lag_since_ms = time.time() * 1000 + LAG_WARMUP_S * 1000
    watch.start()
    log = workdir / f"steady-{topic}.log"
    cmd = perf.command(
        str(source["bootstrap.servers"]),
        topic,
        total,
        payloads,
        throughput=rate,
        workdir=workdir,
        tuning=perf.STEADY_TUNING,
    )
    try:
        proc = janitor.process(spawn(cmd, log))
        summary = perf.finish(proc, log, timeout_s=seconds * 4 + 60)
        janitor.stop(proc)
        watch.wait_for(total, timeout_s=60)
    finally:
        watch.stop()
    return {
        "target_rate_per_s": rate,
        "rate_per_s": summary.records_per_s,
        "sent": summary.records,
        "seen": watch.count,
        **{f"{k}_ms": v for k, v in percentiles(watch.lags_ms).items()},
    }
