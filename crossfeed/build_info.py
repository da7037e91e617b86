"""``crossfeed_build_info``: which crossfeed (and which Kafka client) a process runs.

A gauge fixed at 1 whose labels carry the facts, the Prometheus convention for build
information: ``count by (version) (crossfeed_build_info)`` shows a rolling upgrade, and
joining on ``instance`` puts the version next to any other series.
"""

from __future__ import annotations

import platform

import confluent_kafka
from prometheus_client import Info

from crossfeed import __version__

BUILD = Info("crossfeed_build", "crossfeed version, role and runtime of this process (always 1)")


def labels(role: str) -> dict[str, str]:
    return {
        "version": __version__,
        "role": role,
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.version()[0],
        "librdkafka": confluent_kafka.libversion()[0],
    }


def publish(role: str) -> None:
    BUILD.info(labels(role))
