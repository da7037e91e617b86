"""REST bodies of ``/v1/groups/{group}/translate``, ``/v1/failover`` and ``/v1/failback``."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from crossfeed.translation.rpo import PartitionRpo, PositionRpo
from crossfeed.translation.translator import GroupTranslation, PartitionTranslation


class PositionOut(BaseModel):
    """What a failover may cost a group on one partition: records read again."""

    last_commit: bool = Field(
        description="the translated position is the group's last commit on the source "
        "(the source answered at the failover, or the client library recorded the commit "
        "on the target: timestamps.destination.*); false: commits made after the last one "
        "known were lost with the source"
    )
    known_from: str = Field(
        description="where the position was learnt: listed (admin request), commit-log "
        "(the source's __consumer_offsets), consumer-timestamps, destination-timestamps "
        "(_crossfeed.consumer-timestamps on the target), checkpoint"
    )
    known_until_ms: int = Field(
        description="the group's commits are known up to this time (epoch ms): the last "
        "read of the commit log, or the last listing"
    )
    commit_age_s: float | None = Field(
        description="how old the last known commit was at the failover; null: its time is "
        "unknown (listed offsets and checkpoints carry none)"
    )
    reread_max: int = Field(
        description="upper bound of records the group may read again on the target (0: "
        "none; -1: unknown): the copies between where it resumes and the end of the copies"
    )

    @classmethod
    def of(cls, p: PositionRpo) -> PositionOut:
        return cls.model_validate(p, from_attributes=True)  # the same fields, by name


class DeletedOut(BaseModel):
    """A group position in records the source deleted before they were copied."""

    first: int = Field(description="the group's position: the first offset lost to it")
    last: int = Field(description="the last offset lost (the source's log start - 1)")
    count: int = Field(description="offsets lost (at most that many records)")
    held: bool = Field(
        description="gap.policy=stop: the group partition is not moved until `key` is "
        "acknowledged (crossfeed changefeed ack-gap); false: moved to target_offset"
    )
    key: str = Field(description="topic/partition@offset, for crossfeed changefeed ack-gap")
    line: str = Field(description="the same, in one line as crossfeed status shows it")

    @classmethod
    def of(cls, r: PartitionTranslation, feed: str) -> DeletedOut | None:
        line = r.lost_line(feed)
        if r.lost is None or line is None:
            return None
        lost = r.lost
        return cls(
            first=lost.first, last=lost.last, count=lost.count, held=r.held, key=r.key, line=line
        )


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
        description="offset-sync or header (exact); frontier, timestamp, before-first, "
        "source-deleted (see deleted), none"
    )
    gap: int = Field(description="records consumed on the source past the replicated frontier")
    consumer_timestamp_ms: int
    position: PositionOut | None = Field(
        None, description="failover and failback reports only: the position RPO"
    )
    source_log_start: int = Field(
        -1, description="the source partition's log start offset as known (-1 unknown)"
    )
    deleted: DeletedOut | None = Field(
        None,
        description="method source-deleted: the group's position is in records the source "
        "deleted before they were copied (what it lost, whether it waits for ack-gap)",
    )

    @classmethod
    def of(cls, r: PartitionTranslation, feed: str = "") -> PartitionOut:
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
            position=PositionOut.of(r.position) if r.position is not None else None,
            source_log_start=r.source_log_start,
            deleted=DeletedOut.of(r, feed),
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
            partitions=[PartitionOut.of(p, g.feed) for p in g.partitions],
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
    positions_at_last_commit: int = Field(
        description="group partitions whose translated position is their last commit"
    )
    positions_stale: int = Field(
        description="group partitions that may have committed after their last known commit"
    )
    reread_max_records: int = Field(
        description="sum over group partitions of reread_max (those with a known bound)"
    )
    fenced_tasks: int = Field(
        0,
        description="puller tasks taken over on the target (what they left open is aborted)",
    )
    notes: list[str]


class FailbackRequest(FeedRef):
    replay_extra: bool = Field(False, description="copy the extra data to the standby")
    reverse_feed: str | None = Field(None, description="name of the reverse feed")
    reverse_start: Literal["frontier", "earliest"] = Field(
        "frontier",
        description="frontier: the reverse feed starts where the forward feed's copies end "
        "on the standby; earliest: it reads all of it (provenance drops the copies)",
    )
    keep_reverse: bool = Field(
        False,
        description="keep the reverse feed once the failback is complete (active-active); "
        "by default it is removed then, its work done",
    )
    wait_s: float = Field(
        0.0,
        ge=0,
        description="wait this long for the reverse feed to catch up and for groups with "
        "members on the old primary (clients that died with it, until their sessions time "
        "out) to have none",
    )


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
    removed: bool = Field(
        False,
        description="the failback is complete and the reverse feed was removed (its copy "
        "of what the standby got is done)",
    )
    unassigned_tasks: int = Field(
        0,
        description="tasks of the reverse feed no puller runs: start 'crossfeed puller run "
        "--feed <name>'",
    )


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
    complete: bool = Field(
        False,
        description="the reverse feed caught up and every group is back: the forward feed "
        "replicates from the old primary again",
    )
    forward_state: str = Field(
        "failed_over", description="the forward feed's state after the failback"
    )
    notes: list[str]
