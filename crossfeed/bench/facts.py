"""Machine facts, versions and the tuning in force, recorded with every result."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import psutil

from crossfeed import __version__
from crossfeed.bench import jvm, mm2, perf
from crossfeed.local.kafka import kafka_classpath


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_model() -> str | None:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def machine() -> dict[str, Any]:
    cpus = os.cpu_count() or 1
    load = load_avg()
    return {
        "cpus": cpus,
        "cpu_model": _cpu_model(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "load_avg_start": load,
        # Anything but the benchmark using a quarter of the cores or more makes the
        # figures noisy (the 1-minute load at start, before the benchmark ran anything).
        "busy": load[0] > cpus * 0.25,
    }


def versions() -> dict[str, Any]:
    import confluent_kafka

    try:
        classpath = kafka_classpath()
    except Exception:
        classpath = ""
    return {
        "crossfeed": __version__,
        "python": platform.python_version(),
        "kafka": jvm.jar_version(classpath, "kafka-clients"),
        "mirrormaker2": jvm.jar_version(classpath, "connect-mirror"),
        "java": jvm.java_version(),
        "confluent_kafka": str(confluent_kafka.version()),
        "librdkafka": confluent_kafka.libversion()[0],
    }


def tuning() -> dict[str, Any]:
    """Client settings each side ran with (crossfeed's are its services' own)."""
    return {
        "mm2": {
            "producer": mm2.PRODUCER,
            "consumer": mm2.CONSUMER,
            "tasks.max": 2,
            "heartbeats": "off",
            "checkpoints_and_group_sync": "off for throughput, every 1 s for failover",
            "offset.lag.max": "100 (default)",
            "delivery": "at-least-once (default)",
        },
        "producer_perf": perf.PRODUCER_TUNING,
        "steady_load": perf.STEADY_TUNING,
        "crossfeed": "services' defaults: puller reader max.partition.fetch.bytes 8 MiB; "
        "consumers fetch.queue.backoff.ms 10 (librdkafka's default: 1 s); "
        "copies straight into the target topics in 512 KiB sends per partition; producer "
        "linger.ms 10, batch.size 1 MiB, no compression of its own (puller.copy_compression: "
        "none); transactions (exactly-once)",
    }
