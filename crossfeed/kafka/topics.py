"""Creating and describing topics: idempotent, with errors that say what to fix."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # type: ignore[attr-defined]

from crossfeed.wire import topics as wire_topics

log = logging.getLogger(__name__)

# Topic-level configs a mirror copies to a topic it creates (only where the source
# overrides the broker default): they decide what a consumer of the copy can rely on.
MIRRORED_CONFIGS = (
    "cleanup.policy",
    "retention.ms",
    "retention.bytes",
    "max.message.bytes",
    "compression.type",
    "message.timestamp.type",
    "min.compaction.lag.ms",
    "max.compaction.lag.ms",
    "delete.retention.ms",
    "min.cleanable.dirty.ratio",
    "segment.ms",
    "segment.bytes",
)
DYNAMIC_TOPIC_CONFIG = 1  # ConfigSource.DYNAMIC_TOPIC_CONFIG
VISIBLE_TIMEOUT_S = 30  # how long a created topic may take to appear in the metadata


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    configs: dict[str, str]


def ensure_topic(
    admin: AdminClient, name: str, partitions: int, config: dict[str, str] | None = None
) -> bool:
    """Create ``name`` unless it exists; True if this call created it. Either way it
    returns once the cluster's metadata lists the topic with its partitions: the controller
    answers the creation before every broker's metadata has it, and a client that asks in
    between is told the topic does not exist (seen here under load, right after creating)."""
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config or {})],
        operation_timeout=30,
    )
    created = True
    try:
        futures[name].result(timeout=60)
    except KafkaException as err:
        if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise
        created = False
    if created:
        log.info("created topic %s (%d partitions, %s)", name, partitions, config or {})
    deadline = time.monotonic() + VISIBLE_TIMEOUT_S
    while partition_count(admin, name) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"topic {name} is not in the cluster's metadata "
                f"{VISIBLE_TIMEOUT_S} s after creating it"
            )
        time.sleep(0.05)
    return created


def ensure_internal(admin: AdminClient, name: str, partitions: int = 1) -> bool:
    """Create one of crossfeed's internal topics unless it exists, with its configs from
    the wire contract (crossfeed/wire/topics.py: internal_config); True if created."""
    return ensure_topic(admin, name, partitions, wire_topics.internal_config(name))


def partition_counts(admin: AdminClient, timeout_s: float = 10.0) -> dict[str, int]:
    """Every topic of the cluster with its partition count."""
    meta = admin.list_topics(timeout=timeout_s)
    return {name: len(t.partitions) for name, t in meta.topics.items() if t.error is None}


def partitions_of(
    admin: AdminClient, wanted: Callable[[str], bool], timeout_s: float = 10.0
) -> list[tuple[str, int]]:
    """Every (topic, partition) of the cluster's topics that ``wanted`` selects, sorted."""
    meta = admin.list_topics(timeout=timeout_s)
    return sorted(
        (name, p)
        for name, info in meta.topics.items()
        if info.error is None and wanted(name)
        for p in info.partitions
    )


def partition_count(admin: AdminClient, name: str, timeout_s: float = 10.0) -> int | None:
    """Partitions of one topic, or None while the cluster cannot describe it."""
    topic = admin.list_topics(topic=name, timeout=timeout_s).topics.get(name)
    if topic is None or topic.error is not None or not topic.partitions:
        return None
    return len(topic.partitions)


def overridden_configs(admin: AdminClient, topic: str, keys: tuple[str, ...]) -> dict[str, str]:
    """The topic-level overrides among ``keys`` (not broker defaults)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries: dict[str, Any] = admin.describe_configs([resource])[resource].result(timeout=30)
    return {
        key: entry.value
        for key, entry in entries.items()
        if key in keys and entry.source == DYNAMIC_TOPIC_CONFIG and entry.value is not None
    }


def config_value(admin: AdminClient, topic: str, key: str) -> str | None:
    """The effective value of one topic config (override or default)."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=30)
    entry = entries.get(key)
    return None if entry is None else entry.value
