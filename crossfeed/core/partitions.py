"""Topic-partitions: the unit of a task, partition-count checks, staging placement.

Invariants:

A. ``TopicPartition`` orders by (topic, partition), prints as ``topic/partition`` and
   ``TopicPartition.parse(str(tp)) == tp``.
B. ``staging_partition`` depends only on its arguments (no process-seeded hash): every
   event of one source partition goes to the same staging partition, in every process and
   every release, so per-partition order survives the staging topic.
C. Mirror mode keeps partition numbers, so a target topic needs at least as many
   partitions as its source: ``partitions_to_add`` says how many the puller adds (never
   any to a target that has as many or more: extra target partitions stay, unused), and
   ``grow_refused`` the one line the feed's error state shows when the target will not
   let it.
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


def partitions_to_add(source: int, target: int) -> int:
    """How many partitions the target topic must gain to hold every source partition
    under its own number: ``source - target`` when the target has fewer, else 0 (a
    target with more partitions stays as it is). ValueError for a count below 1, which no
    real topic has."""
    if source < 1 or target < 1:
        raise ValueError(f"partition counts must be >= 1, got source={source} target={target}")
    return max(0, source - target)


def grow_refused(
    source: int, target: int, reason: str, *, topic: str, target_topic: str | None = None
) -> str:
    """The feed's error when the target cluster refuses to add partitions (no Alter right
    on the topic, a policy): what is wrong and how to fix it, in one line. ``target_topic``
    defaults to ``topic`` (identity rename)."""
    name = target_topic or topic
    return (
        f"target topic {name!r} has {target} partition(s) but source topic {topic!r} has "
        f"{source}, and the target refused to add them ({reason}); mirror mode keeps "
        f"partition numbers: allow crossfeed's principal to Alter topic {name!r}, or add them "
        f"by hand (kafka-topics.sh --alter --topic {name} --partitions {source})"
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
