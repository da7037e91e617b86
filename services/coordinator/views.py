"""What the REST API returns (pydantic models, so OpenAPI documents them), built from a
state snapshot and the live members — the same data on the leader and on standbys."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from crossfeed.core.secrets import mask_text, masked
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.members import Member, MembersView
from crossfeed.services.coordinator.records import task_name

if TYPE_CHECKING:  # a name for a signature only: leadership imports metrics, which imports us
    from crossfeed.services.coordinator.leadership import LeaderInfo


class FeedInfo(BaseModel):
    """A changefeed as created, with its lifecycle state."""

    name: str
    source: str
    sink_uri: str
    mode: str
    topics: list[str]
    exclude: list[str]
    rename_format: str
    start: str
    config: dict[str, str] = Field(description="options given with --config")
    created_at_ms: int
    state: str
    last_error: str | None


class TaskInfo(BaseModel):
    task: str = Field(description="<feed>/<staging partition>")
    owner: str | None = Field(description="puller instance running it, null if none")


class HeldBack(BaseModel):
    """Ordered feeds: a source partition whose resolved_ts stopped moving and holds the
    feed's global resolved_ts back (reported by the sorter)."""

    partition: str = Field(description="<topic>/<partition> of the source")
    since_ms: int = Field(description="when its resolved_ts last advanced, epoch ms")


class FeedStatusInfo(BaseModel):
    """Runtime view of one feed."""

    name: str
    state: str
    last_error: str | None
    tasks: list[TaskInfo]
    generation: int = Field(description="latest puller assignment generation")
    epoch: int = Field(description="leader epoch of that assignment")
    pullers: list[str] = Field(description="live puller instances of the feed")
    sinks: list[str] = Field(description="live sink instances of the feed")
    sorters: list[str] = Field([], description="ordered feeds: live sorter instances")
    held_back_by: list[HeldBack] = Field(
        [], description="ordered feeds: source partitions holding resolved_ts back"
    )
    resolved_ts_us: int = Field(description="global resolved_ts, µs; 0 if unknown")
    checkpoint_ts_us: int = Field(description="checkpoint_ts, µs; 0 if unknown")
    consistency_ts_us: int = Field(description="consistency_ts (safe point), µs; never goes back")
    lag_s: float | None = Field(
        description="now - consistency_ts, seconds (0 while the source is idle: no change "
        "waits); null if unknown"
    )
    idle_since_us: int = Field(
        0,
        description="ordered feeds: the source has sent nothing new and nothing waits; its "
        "last resolved point then (source time, µs), which the target holds; 0 otherwise",
    )
    updated_at_ms: int
    syncpoint_ts_us: int = Field(
        0, description="database sinks: consistency_ts of the newest syncpoint row, µs; 0 if none"
    )
    syncpoint_at_ms: int = Field(
        0, description="database sinks: the target's time of that syncpoint, epoch ms; 0 if none"
    )
    commits: str | None = Field(
        None,
        description="mirror feeds, as the leader answers: how consumer group commits reach "
        "the offset translator — 'stream' (the source's __consumer_offsets, translated within "
        "~100 ms) or 'poll (reason)' (group offsets listed every translate_interval_s); "
        "null on a standby and for other feeds",
    )
    pair: str | None = Field(
        None,
        description="active-active: the pair this feed is one direction of (its connectors "
        "and the databases' findings: GET /v1/pairs/{pair})",
    )
    notices: list[str] = Field(
        [],
        description="what the feed's pullers report without the feed being in error, "
        "'<instance>: <line>': gaps (source records deleted before they were copied: the "
        "partition, the offsets and how many, whether it waits) until acknowledged; and, as "
        "the leader answers, 'translation: <line>': consumer group positions in such "
        "records (the group, the offsets and how many, where it resumes or that it waits "
        "for ack-gap under gap.policy=stop)",
    )


class Capture(BaseModel):
    """One live instance (TiCDC calls them captures)."""

    instance_id: str
    role: str
    host: str
    pid: int
    version: str
    address: str
    state: str
    feeds: list[str]
    tasks: list[str]
    started_at_ms: int
    heartbeat_age_ms: int
    last_error: str


class Peer(BaseModel):
    instance_id: str
    address: str
    heartbeat_age_ms: int


class HaStatus(BaseModel):
    """Leadership as this coordinator sees it (seed 004's /_ha/status)."""

    instance_id: str
    role: Literal["leader", "standby"]
    leader: str | None = Field(description="instance holding a live lease, null if none")
    leader_address: str | None
    epoch: int
    lease_expires_in_ms: int | None
    peers: list[Peer] = Field(description="other live coordinators")


def feed_info(view: StateView, name: str) -> FeedInfo:
    stored = view.feeds[name]
    record = stored.record()
    status = view.statuses.get(name)
    return FeedInfo(
        name=name,
        source=record["source"],
        sink_uri=mask_text(record["sink_uri"]),  # answers never carry a password
        mode=record["mode"],
        topics=record["topics"],
        exclude=record["exclude"],
        rename_format=record["rename_format"],
        start=record["start"],
        config=masked(record["config"]),
        created_at_ms=stored.created_at_ms,
        state=status.state if status else "normal",
        last_error=mask_text(status.last_error) if status and status.last_error else None,
    )


def feed_status(
    view: StateView,
    members: MembersView,
    name: str,
    now_ms: int,
    commits: str | None = None,
    translation: Iterable[str] = (),
) -> FeedStatusInfo:
    spec = view.feeds[name].spec
    status = view.statuses.get(name)
    assignments = view.assignments.get(name, {})
    owner = {s: i for i, a in assignments.items() for s in a.tasks}
    latest = max(assignments.values(), key=lambda a: a.generation, default=None)
    consistency = status.consistency_ts_us if status else 0
    syncpoint = max(
        ((m.syncpoint_ts_us, m.syncpoint_at_ms) for m in members.of_role("sink", name).values()),
        default=(0, 0),
    )
    sorters = members.of_role("sorter", name)
    checkpoint = status.checkpoint_ts_us if status else 0
    idle = idle_since(sorters.values(), checkpoint)
    lag = round(max(now_ms / 1000 - consistency / 1e6, 0.0), 3) if consistency else None
    return FeedStatusInfo(
        name=name,
        state=status.state if status else "normal",
        last_error=mask_text(status.last_error) if status and status.last_error else None,
        tasks=[
            TaskInfo(task=task_name(name, s), owner=owner.get(s))
            for s in range(spec.config.staging_partitions)
        ],
        generation=latest.generation if latest else 0,
        epoch=latest.epoch if latest else 0,
        pullers=sorted(members.of_role("puller", name)),
        sinks=sorted(members.of_role("sink", name)),
        sorters=sorted(sorters),
        held_back_by=held_back(sorters.values()),
        resolved_ts_us=status.resolved_ts_us if status else 0,
        checkpoint_ts_us=checkpoint,
        consistency_ts_us=consistency,
        lag_s=0.0 if idle else lag,
        idle_since_us=idle,
        updated_at_ms=status.updated_at_ms if status else 0,
        syncpoint_ts_us=syncpoint[0],
        syncpoint_at_ms=syncpoint[1],
        commits=commits,
        pair=spec.config.active_active_pair,
        notices=sorted(
            mask_text(f"{instance}: {notice}")
            for instance, member in members.of_role("puller", name).items()
            for notice in member.notices
        )
        + [f"translation: {notice}" for notice in translation],
    )


def idle_since(sorters: Iterable[Member], checkpoint_ts_us: int) -> int:
    """Ordered feeds: the source's last resolved point when every live sorter says the
    source went quiet with nothing waiting (services/sorter/rules.py, IdleWatch) and the
    sinks have applied everything up to it; 0 otherwise (changes wait: lag is real)."""
    points = [m.idle_since_us for m in sorters]
    if not points or not all(points):
        return 0
    point = max(points)
    return point if checkpoint_ts_us >= point else 0


def held_back(sorters: Iterable[Member]) -> list[HeldBack]:
    """The partitions the feed's sorters say hold it back, oldest first."""
    since: dict[str, int] = {}
    for member in sorters:
        for partition, us in member.laggards.items():
            since[partition] = min(since.get(partition, us), us)
    return [
        HeldBack(partition=p, since_ms=us // 1000)
        for p, us in sorted(since.items(), key=lambda kv: (kv[1], kv[0]))
    ]


def captures(members: MembersView) -> list[Capture]:
    return [
        Capture(
            instance_id=m.instance_id,
            role=m.role,
            host=m.host,
            pid=m.pid,
            version=m.version,
            address=m.address,
            state=m.state,
            feeds=list(m.feeds),
            tasks=list(m.tasks),
            started_at_ms=m.started_at_ms,
            heartbeat_age_ms=entry.age_ms,
            last_error=mask_text(m.last_error),
        )
        for _, entry in sorted(members.live.items())
        for m in (entry.member,)
    ]


def ha_status(info: LeaderInfo, members: MembersView) -> HaStatus:
    peers = [
        Peer(instance_id=i, address=entry.member.address, heartbeat_age_ms=entry.age_ms)
        for i, entry in sorted(members.live.items())
        if entry.member.role == "coordinator" and i != info.me
    ]
    return HaStatus(
        instance_id=info.me,
        role="leader" if info.leading else "standby",
        leader=info.holder,
        leader_address=members.address_of(info.holder) if info.holder else None,
        epoch=info.epoch,
        lease_expires_in_ms=info.expires_in_ms,
        peers=peers,
    )
