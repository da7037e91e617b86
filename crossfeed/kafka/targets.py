"""What a writer must know of a target topic before writing to it: partition count
and effective max.message.bytes, cached and refreshed on a miss."""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka.admin import AdminClient

from crossfeed.kafka import topics as kafka_topics

REFRESH_S = 30.0
BROKER_DEFAULT_MAX_MESSAGE_BYTES = 1048588
# A record's size on the wire adds batch and record framing to key, value and headers.
RECORD_OVERHEAD = 128


@dataclass(frozen=True)
class TargetTopic:
    name: str
    partitions: int
    max_message_bytes: int


class TargetTopics:
    def __init__(self, admin: AdminClient) -> None:
        self.admin = admin
        self.cache: dict[str, tuple[float, TargetTopic]] = {}

    def get(self, name: str) -> TargetTopic | None:
        """The topic's facts, or None while it does not exist (the puller creates it)."""
        hit = self.cache.get(name)
        if hit and time.monotonic() - hit[0] < REFRESH_S:
            return hit[1]
        meta = self.admin.list_topics(name, timeout=10).topics.get(name)
        if meta is None or meta.error is not None:
            return None
        value = kafka_topics.config_value(self.admin, name, "max.message.bytes")
        info = TargetTopic(
            name, len(meta.partitions), int(value) if value else BROKER_DEFAULT_MAX_MESSAGE_BYTES
        )
        self.cache[name] = (time.monotonic(), info)
        return info


def record_size(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None
) -> int:
    """A record's size as the broker counts it against max.message.bytes (upper bound)."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, header_value in headers or []:
        size += len(name) + (len(header_value) if header_value else 0) + 8
    return size
