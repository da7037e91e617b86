"""REST bodies of ``/v1/groups/{group}/translate``, ``/v1/failover`` and ``/v1/failback``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from crossfeed.translation.rpo import PartitionRpo
from crossfeed.translation.translator import GroupTranslation, PartitionTranslation


class PartitionOut(BaseModel):
    """One group partition: where it is on the source, where it resumes on the target."""

    topic: str
    partition: int
    source_offset: int
    target_topic: str
    target_partition: int
    target_offset: int | None = Field(description="null: nothing known to translate it by")
    exact: bool = Field(description="zero re-reads, zero skips of what the target holds")
    method: str = Field(
        description="offset-sync or header (exact); frontier, timestamp, before-first, none"
    )
    gap: int = Field(description="records consumed on the source past the replicated frontier")
    consumer_timestamp_ms: int

    @classmethod
    def of(cls, r: PartitionTranslation) -> PartitionOut:
        return cls(
            topic=r.topic,
            partition=r.partition,
            source_offset=r.source_offset,
            target_topic=r.target_topic,
            target_partition=r.target_partition,
            target_offset=r.target_offset,
            exact=r.exact,
            method=r.method,
            gap=r.gap,
            consumer_timestamp_ms=r.consumer_timestamp_ms,
        )


class GroupOut(BaseModel):
    feed: str
    group: str
    source_reachable: bool
    translated: bool = Field(description="the feed's translate.* filters let it move")
    active_members: int | None = Field(description="members on the destination now")
    partitions: list[PartitionOut]

    @classmethod
    def of(cls, g: GroupTranslation) -> GroupOut:
        return cls(
            feed=g.feed,
            group=g.group,
            source_reachable=g.source_reachable,
            translated=g.translated,
            active_members=g.active_members,
            partitions=[PartitionOut.of(p) for p in g.partitions],
        )


class RpoOut(BaseModel):
    """Per source partition: what the source held that the target does not."""

    topic: str
    partition: int
    source_end: int | None
    replicated_to: int | None
    target_frontier: int | None
    unreplicated: int = Field(description="records; -1 unknown")
    counted: bool = Field(description="false: an upper bound in offsets")
    rpo_seconds: float | None
    known_at_ms: int

    @classmethod
    def of(cls, r: PartitionRpo) -> RpoOut:
        return cls(
            topic=r.topic,
            partition=r.partition,
            source_end=r.source_end,
            replicated_to=r.replicated_to,
            target_frontier=r.target_frontier,
            unreplicated=r.unreplicated,
            counted=r.counted,
            rpo_seconds=r.rpo_seconds,
            known_at_ms=r.known_at_ms,
        )


class FeedRef(BaseModel):
    feed: str
    feed_spec: dict[str, Any] | None = Field(
        None, description="a feed-file feed's fields (the coordinator does not store it)"
    )


class FailoverRequest(FeedRef):
    pass


class FailoverReport(BaseModel):
    feed: str
    source: str
    target: str
    stopped_by: Literal["coordinator", "operator"]
    source_reachable: bool
    groups: list[GroupOut]
    moved: dict[str, int] = Field(description="group -> destination partitions moved")
    active: list[str] = Field(description="groups left alone: members on the destination")
    partitions: list[RpoOut]
    unreplicated_records: int
    rpo_seconds: float | None
    notes: list[str]


class FailbackRequest(FeedRef):
    replay_extra: bool = Field(False, description="copy the extra data to the standby")
    reverse_feed: str | None = Field(None, description="name of the reverse feed")
    reverse_start: Literal["frontier", "earliest"] = Field(
        "frontier",
        description="frontier: the reverse feed starts where the forward feed's copies end "
        "on the standby; earliest: it reads all of it (provenance drops the copies)",
    )
    wait_s: float = Field(0.0, ge=0, description="wait this long for the reverse feed")


class ExtraOut(BaseModel):
    """Records on the old primary that never reached the standby."""

    topic: str
    partition: int
    replicated_to: int
    end: int
    extra: int
    counted: bool
    replayed: int


class ReverseOut(BaseModel):
    name: str
    action: Literal["created", "existing", "start-it"]
    spec: dict[str, Any]
    positions_seeded: bool
    lag: list[RpoOut]
    caught_up: bool


class FailbackReport(BaseModel):
    feed: str
    old_primary: str
    standby: str
    extra: list[ExtraOut]
    extra_records: int
    replayed_records: int
    reverse: ReverseOut
    groups: list[GroupOut]
    moved: dict[str, int]
    active: list[str]
    waiting: list[str] = Field(description="groups with partitions not yet exactly translatable")
    notes: list[str]
