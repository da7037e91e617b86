"""What a translation round produces: per group partition, per group, per round."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from crossfeed.core import gaps
from crossfeed.core.gaps import Gap
from crossfeed.core.partitions import TopicPartition
from crossfeed.translation.rpo import PositionRpo


@dataclass(frozen=True, slots=True)
class PartitionTranslation:
    """One group's position on one source partition and where it resumes on the target."""

    group: str
    topic: str
    partition: int
    source_offset: int
    target_topic: str
    target_partition: int
    target_offset: int | None
    exact: bool
    method: str
    gap: int
    """Records the group consumed past the replicated frontier (-1 unknown)."""
    consumer_timestamp_ms: int
    translated_at_ms: int
    known_from: str = "listed"
    """Where the source offset was learnt (see source.Known.via)."""
    known_at_ms: int = -1
    """When it was learnt (listed, or read from the commit log)."""
    committed_at_ms: int = -1
    """When the group made that commit (-1 unknown)."""
    past_recorded: bool = False
    """Past every commit the opt-in recorded on the destination (latest.py, rule 4)."""
    position: PositionRpo | None = None
    """Failover rounds only: what the failover may cost the group here."""
    source_log_start: int = -1
    """The source partition's log start offset as known when translated (-1 unknown)."""
    lost: Gap | None = None
    """Offsets from the group's position on that the source deleted before they were
    copied (rules.py, rule 0)."""
    held: bool = False
    """Not moved: ``lost`` under gap.policy=stop, not acknowledged."""

    @property
    def key(self) -> str:
        """The key ``crossfeed changefeed ack-gap`` takes for this position."""
        return gaps.key_of(TopicPartition(self.topic, self.partition), self.source_offset)

    def lost_line(self, feed: str) -> str | None:
        """What rule 0 found, in one line (status notices, logs, reports); None without."""
        lost = self.lost
        if lost is None:
            return None
        where = f"{self.target_topic}/{self.target_partition}@{self.target_offset}"
        head = (
            f"group {self.group}: {self.topic}/{self.partition}: its position {lost.first} is in "
            f"offsets {lost.first}-{lost.last} ({lost.count} records) deleted at the source "
            f"before they were copied"
        )
        if self.held:
            return (
                f"{head}; not moved (gap.policy=stop) until acknowledged: "
                f"'crossfeed changefeed ack-gap {feed} {self.key}', then it resumes at {where}"
            )
        return f"{head}; it resumes at {where}, the copy of the first record after them"

    def checkpoint(self, feed: str, source_cluster: str) -> dict[str, Any]:
        """Its GroupCheckpoint record (only for a translation with a target offset)."""
        assert self.target_offset is not None
        return {
            "feed": feed,
            "group": self.group,
            "topic": self.topic,
            "partition": self.partition,
            "source_offset": self.source_offset,
            "target_topic": self.target_topic,
            "target_partition": self.target_partition,
            "target_offset": self.target_offset,
            "exact": self.exact,
            "gap_records": self.gap,
            "source_cluster": source_cluster,
            "translated_at_ms": self.translated_at_ms,
            "source_log_start": self.source_log_start,
        }


@dataclass(frozen=True, slots=True)
class GroupTranslation:
    """One group, every partition of the feed it committed on the source."""

    feed: str
    group: str
    source_reachable: bool
    translated: bool
    """True if the feed's filters let the translator move this group."""
    active_members: int | None
    """Members of the group on the destination now (None: unknown)."""
    partitions: list[PartitionTranslation]


@dataclass
class TickReport:
    feed: str
    ready: bool
    source_reachable: bool = False
    groups: int = 0
    partitions: int = 0
    checkpoints_written: int = 0
    committed: dict[str, int] = field(default_factory=dict)
    """Group -> destination partitions moved this tick."""
    active: list[str] = field(default_factory=list)
    """Groups left alone: they have active members on the destination."""
    took_s: float = 0.0
    note: str = ""
    commits: str = ""
    """How group commits reached the translator: ``stream`` or ``poll (why)``."""
