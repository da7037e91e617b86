"""What a writer must know of a target topic before writing to it: partition count
and effective max.message.bytes, cached and refreshed on a miss."""

from __future__ import annotations

import time
from collections.abc import Collection
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

    def get(self, name: str, partition: int = 0) -> TargetTopic | None:
        """The topic's facts, or None while it does not exist (the puller creates it).
        Asked again, not cached, when they do not list ``partition`` (the puller may
        have added partitions since)."""
        hit = self.cache.get(name)
        if hit and time.monotonic() - hit[0] < REFRESH_S and partition < hit[1].partitions:
            return hit[1]
        self.cache.pop(name, None)
        self.prefetch([name])
        hit = self.cache.get(name)
        return hit[1] if hit else None

    def prefetch(self, names: Collection[str]) -> None:
        """Learn the facts of every topic in ``names`` not cached (or stale) in two
        requests, however many: a puller given 1,000 new topics at once asked two per
        topic, one after the other."""
        now = time.monotonic()
        stale = sorted(
            n for n in names if not (n in self.cache and now - self.cache[n][0] < REFRESH_S)
        )
        if not stale:
            return
        for name in stale:
            self.cache.pop(name, None)  # gone unless the cluster still describes it
        if len(stale) == 1:  # one topic's metadata is a smaller answer than the cluster's
            meta = self.admin.list_topics(stale[0], timeout=10).topics
        else:
            meta = self.admin.list_topics(timeout=10).topics
        present = [n for n in stale if n in meta and meta[n].error is None]
        values = kafka_topics.config_values(self.admin, present, "max.message.bytes")
        for name in present:
            value = values.get(name)
            if isinstance(value, Exception):
                continue  # deleted in between, say: asked again on the next get
            size = int(value) if value else BROKER_DEFAULT_MAX_MESSAGE_BYTES
            self.cache[name] = (now, TargetTopic(name, len(meta[name].partitions), size))


def record_size(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None
) -> int:
    """A record's size as the broker counts it against max.message.bytes (upper bound)."""
    size = RECORD_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    for name, header_value in headers or []:
        size += len(name) + (len(header_value) if header_value else 0) + 8
    return size
