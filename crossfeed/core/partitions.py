"""Topic-partitions: the unit of a task, partition-count checks, staging placement.

Invariants:

A. ``TopicPartition`` orders by (topic, partition), prints as ``topic/partition`` and
   ``TopicPartition.parse(str(tp)) == tp``.
B. ``staging_partition`` depends only on its arguments (no process-seeded hash): every
   event of one source partition goes to the same staging partition, in every process and
   every release, so per-partition order survives the staging topic.
C. Mirror mode keeps partition numbers, so a target topic needs at least as many
   partitions as its source; ``check_partition_counts`` says so, and how to fix it.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    """One partition of one topic (of a cluster the context names)."""

    topic: str
    partition: int

    def __post_init__(self) -> None:
        if not self.topic:
            raise ValueError("topic must not be empty")
        if self.partition < 0:
            raise ValueError(f"partition must be >= 0, got {self.partition} for {self.topic!r}")

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"

    @classmethod
    def parse(cls, text: str) -> TopicPartition:
        """Parse ``topic/partition`` (split at the last ``/``); ValueError if malformed."""
        topic, sep, number = text.rpartition("/")
        if not sep or not number.isascii() or not number.isdigit():
            raise ValueError(f"expected <topic>/<partition>, got {text!r}")
        return cls(topic, int(number))


def check_partition_counts(
    source: int, target: int, *, topic: str, target_topic: str | None = None
) -> str | None:
    """An error message when the target topic has fewer partitions than its source.

    Returns None when ``target >= source`` (extra target partitions simply stay unused).
    ``target_topic`` defaults to ``topic`` (identity rename). Raises ValueError for a
    count below 1, which no real topic has.
    """
    if source < 1 or target < 1:
        raise ValueError(f"partition counts must be >= 1, got source={source} target={target}")
    if target >= source:
        return None
    name = target_topic or topic
    return (
        f"target topic {name!r} has {target} partition(s) but source topic {topic!r} has "
        f"{source}; mirror mode keeps partition numbers, so increase the target topic to at "
        f"least {source} partitions (kafka-topics.sh --alter --topic {name} --partitions "
        f"{source}) or delete it and let crossfeed create it"
    )


def staging_partition(topic: str, partition: int, staging_partitions: int) -> int:
    """The ``_crossfeed.<feed>.changes`` partition for events of ``topic/partition``.

    ``crc32("topic/partition") mod staging_partitions``: stable across processes (B).
    """
    if staging_partitions < 1:
        raise ValueError(f"staging_partitions must be >= 1, got {staging_partitions}")
    if partition < 0:
        raise ValueError(f"partition must be >= 0, got {partition}")
    return zlib.crc32(f"{topic}/{partition}".encode()) % staging_partitions
