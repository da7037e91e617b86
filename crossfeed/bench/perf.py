"""Apache Kafka's ``ProducerPerformance``: the backlog, the steady load, and dc-b's ceiling.

Every record is one of 1,024 random payloads of A-Z letters (``--payload-file``): the
tool's own ``--record-size`` repeats one payload, which lz4 shrinks to almost nothing
and would flatter every figure measured in bytes.
"""

from __future__ import annotations

import random
import re
import string
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossfeed.bench import jvm

MAIN = "org.apache.kafka.tools.ProducerPerformance"
HEAP = "-Xms128m -Xmx512m"
PAYLOADS = 1024

PRODUCER_TUNING: dict[str, str] = {
    # The same batching and compression as crossfeed's puller producer (services/puller).
    "batch.size": str(1 << 20),
    "linger.ms": "10",
    "compression.type": "lz4",
    "acks": "all",
    "enable.idempotence": "true",
}
STEADY_TUNING: dict[str, str] = {**PRODUCER_TUNING, "linger.ms": "1"}
# Backlogs (and the ceiling run, written the same way) spread evenly: the default
# partitioner moves on after each batch (1 MiB), so a 1,000,000 x 100 B backlog held 73k
# records in one partition and 193k in another, and a replicator's rate then said more
# about whichever task or puller held the big ones.
BACKLOG_TUNING: dict[str, str] = {
    **PRODUCER_TUNING,
    "partitioner.class": "org.apache.kafka.clients.producer.RoundRobinPartitioner",
}

_SUMMARY = re.compile(
    r"(?P<records>\d+) records sent, (?P<rate>[\d.]+) records/sec \((?P<mib>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)


@dataclass(frozen=True)
class PerfSummary:
    """The last line ProducerPerformance prints (its MB/sec is MiB/s)."""

    records: int
    records_per_s: float
    mib_per_s: float
    avg_latency_ms: float
    max_latency_ms: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    p999_ms: float


def parse_summary(output: str) -> PerfSummary:
    """The final summary of ProducerPerformance's output (the progress lines before it
    have no percentiles); ValueError if the run printed none."""
    matches = list(_SUMMARY.finditer(output))
    if not matches:
        tail = "\n".join(output.strip().splitlines()[-5:])
        raise ValueError(f"no ProducerPerformance summary in its output:\n{tail}")
    g = matches[-1].groupdict()
    return PerfSummary(
        records=int(g["records"]),
        records_per_s=float(g["rate"]),
        mib_per_s=float(g["mib"]),
        avg_latency_ms=float(g["avg"]),
        max_latency_ms=float(g["max"]),
        p50_ms=float(g["p50"]),
        p95_ms=float(g["p95"]),
        p99_ms=float(g["p99"]),
        p999_ms=float(g["p999"]),
    )


def payload_file(workdir: Path, size: int, seed: int = 7) -> Path:
    """1,024 random A-Z payloads of ``size`` bytes, one a line."""
    path = workdir / f"payloads-{size}.txt"
    if not path.exists():
        rng = random.Random(seed)
        letters = string.ascii_uppercase
        path.write_text(
            "".join("".join(rng.choices(letters, k=size)) + "\n" for _ in range(PAYLOADS))
        )
    return path


def command(
    bootstrap: str,
    topic: str,
    records: int,
    payloads: Path,
    *,
    throughput: float,
    workdir: Path,
    tuning: dict[str, str] | None = None,
) -> list[str]:
    props = [f"{k}={v}" for k, v in (tuning or PRODUCER_TUNING).items()]
    args = [
        "--bootstrap-server",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--throughput",
        str(int(throughput)) if throughput > 0 else "-1",
        "--payload-file",
        str(payloads),
        "--reporting-interval",
        "60000",
        "--command-property",
        *props,
    ]
    return jvm.java(MAIN, args, workdir=workdir, heap=HEAP, log_level="WARN")


def finish(proc: subprocess.Popen[bytes], log: Path, timeout_s: float) -> PerfSummary:
    """Wait for a run started with :func:`start`; its summary, or an error with the log."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise RuntimeError(f"ProducerPerformance ran over {timeout_s:.0f}s; see {log}") from None
    output = log.read_text(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"ProducerPerformance exited {proc.returncode}:\n{output[-2000:]}")
    return parse_summary(output)


def as_dict(summary: PerfSummary) -> dict[str, Any]:
    return {
        "records": summary.records,
        "records_per_s": summary.records_per_s,
        "ack_latency_ms": {
            "avg": summary.avg_latency_ms,
            "p50": summary.p50_ms,
            "p99": summary.p99_ms,
            "max": summary.max_latency_ms,
        },
    }
