"""Load with ProducerPerformance: a backlog on dc-a, and the raw produce ceiling of dc-b."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from crossfeed.bench import perf
from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.jvm import spawn
from crossfeed.bench.measure import ProcessCost, create_topics


def _flat_out(
    conf: dict[str, Any], topic: str, records: int, payloads: Path, workdir: Path, even: bool
) -> list[str]:
    """ProducerPerformance writing ``records`` as fast as it can; ``even``: round robin
    over the partitions (perf.BACKLOG_TUNING), else a batch at a time (the default)."""
    return perf.command(
        str(conf["bootstrap.servers"]),
        topic,
        records,
        payloads,
        throughput=-1,
        workdir=workdir,
        tuning=perf.BACKLOG_TUNING if even else perf.PRODUCER_TUNING,
    )


def backlog(
    conf: dict[str, Any],
    topic: str,
    records: int,
    payloads: Path,
    workdir: Path,
    janitor: Janitor,
    even: bool = True,
) -> dict[str, Any]:
    """``records`` values on ``topic`` (created before), as fast as the producer can;
    ``even``: the same number in every partition. Not for records written while a
    replicator runs over many partitions: round robin over 1,024 partitions makes
    batches of a record or two, and the writer, not the replicator, sets the rate
    (~10k records/s for every replicator at 128 partitions)."""
    log = workdir / f"backlog-{topic}.log"
    cmd = _flat_out(conf, topic, records, payloads, workdir, even)
    started = time.monotonic()
    proc = janitor.process(spawn(cmd, log))
    summary = perf.finish(proc, log, timeout_s=max(300.0, records / 2000))
    janitor.stop(proc)
    return {"seconds": time.monotonic() - started, **perf.as_dict(summary)}


def ceiling(
    conf: dict[str, Any],
    topic: str,
    *,
    records: int,
    size: int,
    partitions: int,
    payloads: Path,
    workdir: Path,
    janitor: Janitor,
    broker_pid: int | None,
) -> dict[str, Any]:
    """Produce straight into dc-b with the replicators' batching: what no replicator
    writing to dc-b can beat on this machine."""
    create_topics(conf, [topic], partitions)
    janitor.topics(conf, [topic])
    log = workdir / f"ceiling-{topic}.log"
    cmd = _flat_out(conf, topic, records, payloads, workdir, even=True)
    proc = janitor.process(spawn(cmd, log))
    cost = ProcessCost(
        {"producer-perf": proc.pid, **({"dc-b broker": broker_pid} if broker_pid else {})}
    )
    try:
        summary = perf.finish(proc, log, timeout_s=max(300.0, records / 2000))
    finally:
        costs = cost.finish()
        janitor.stop(proc)
        janitor.drop_topics(conf, [topic])
    rate = summary.records_per_s
    producer = costs["producer-perf"]
    return {
        "system": "ceiling",
        "records": records,
        "record_bytes": size,
        "partitions": partitions,
        "records_per_s": rate,
        "mb_per_s": rate * size / 1e6,
        # ProducerPerformance's JVM, start-up included (a JVM's start costs ~1-2 CPU s).
        "cpu_s_per_million": producer["cpu_s"] / records * 1e6,
        "processes": {"producer-perf": producer},
        "brokers": {k: v for k, v in costs.items() if k != "producer-perf"},
        **{k: v for k, v in perf.as_dict(summary).items() if k == "ack_latency_ms"},
    }
