"""The coordinator's objects in ``_crossfeed.state``: keys, Avro values, in-memory views.

Keys (schemas/README.md): ``feed/<feed>`` → FeedSpec, ``status/<feed>`` → FeedStatus,
``assignment/<feed>/<role>/<instance_id>`` → Assignment, ``lease/coordinator`` → Lease.
Values are Avro (``crossfeed.wire.codec``); the views below are what the rest of the
coordinator works with, and each converts itself to its record.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from crossfeed.core.lease import LeaseView
from crossfeed.feeds import FeedSpec
from crossfeed.state import feed_from_record
from crossfeed.wire import codec, topics

LEASE_KEY = "lease/coordinator"

FeedState = Literal["normal", "paused", "error", "failed", "removed", "failed_over"]
RUNNING_STATES: frozenset[str] = frozenset({"normal", "error"})
"""States in which a feed's tasks are assigned to live instances."""


def feed_key(feed: str) -> str:
    return f"feed/{feed}"


def status_key(feed: str) -> str:
    return f"status/{feed}"


def assignment_key(feed: str, role: str, instance_id: str) -> str:
    return f"assignment/{feed}/{role}/{instance_id}"


def task_name(feed: str, staging_partition: int) -> str:
    """How logs and the status table name a puller task: ``orders/3``."""
    return f"{feed}/{staging_partition}"


@dataclass(frozen=True, slots=True)
class StoredFeed:
    """A feed as created, with its creation time."""

    spec: FeedSpec
    created_at_ms: int

    def record(self) -> dict[str, Any]:
        spec = self.spec
        options = spec.config.model_dump(by_alias=True, exclude_unset=True, exclude_none=True)
        return {
            "name": spec.name,
            "source": spec.source,
            "sink_uri": spec.sink_uri,
            "mode": spec.mode,
            "topics": list(spec.topics),
            "exclude": list(spec.exclude),
            "rename_format": spec.rename_format,
            "start": spec.start,
            "config": {key: str(value) for key, value in options.items()},
            "created_at_ms": self.created_at_ms,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> StoredFeed:
        return cls(feed_from_record(record), int(record["created_at_ms"]))

    def encode(self) -> bytes:
        return codec.encode("FeedSpec", self.record())


@dataclass(frozen=True, slots=True)
class FeedStatus:
    """A feed's lifecycle state and timestamps, as the leader last published them."""

    feed: str
    state: FeedState
    last_error: str | None = None
    resolved_ts_us: int = 0
    checkpoint_ts_us: int = 0
    consistency_ts_us: int = 0
    updated_at_ms: int = 0
    leader_epoch: int = 0

    def encode(self) -> bytes:
        return codec.encode(
            "FeedStatus",
            {
                "feed": self.feed,
                "state": self.state,
                "last_error": self.last_error,
                "resolved_ts_us": self.resolved_ts_us,
                "checkpoint_ts_us": self.checkpoint_ts_us,
                "consistency_ts_us": self.consistency_ts_us,
                "updated_at_ms": self.updated_at_ms,
                "leader_epoch": self.leader_epoch,
            },
        )

    @classmethod
    def decode(cls, value: bytes) -> FeedStatus:
        return cls(**codec.decode("FeedStatus", value))

    def same_content(self, other: FeedStatus | None) -> bool:
        """Equal apart from when and by whom it was written."""
        if other is None:
            return False
        return replace(self, updated_at_ms=0, leader_epoch=0) == replace(
            other, updated_at_ms=0, leader_epoch=0
        )


@dataclass(frozen=True, slots=True)
class Assignment:
    """The tasks (staging partitions of ``_crossfeed.<feed>.changes``) of one instance."""

    feed: str
    role: str
    instance_id: str
    epoch: int
    generation: int
    tasks: frozenset[int]

    @property
    def key(self) -> str:
        return assignment_key(self.feed, self.role, self.instance_id)

    def encode(self) -> bytes:
        topic = topics.changes(self.feed)
        return codec.encode(
            "Assignment",
            {
                "feed": self.feed,
                "role": self.role,
                "instance_id": self.instance_id,
                "epoch": self.epoch,
                "generation": self.generation,
                "partitions": [{"topic": topic, "partition": s} for s in sorted(self.tasks)],
            },
        )

    @classmethod
    def decode(cls, value: bytes) -> Assignment:
        record = codec.decode("Assignment", value)
        return cls(
            feed=record["feed"],
            role=record["role"],
            instance_id=record["instance_id"],
            epoch=record["epoch"],
            generation=record["generation"],
            tasks=frozenset(p["partition"] for p in record["partitions"]),
        )


@dataclass(frozen=True, slots=True)
class Lease:
    """The coordinator lease as written: the pure view plus when its holder took it."""

    view: LeaseView
    acquired_at_ms: int

    def encode(self) -> bytes:
        return codec.encode(
            "Lease",
            {
                "holder": self.view.holder,
                "epoch": self.view.epoch,
                "acquired_at_ms": self.acquired_at_ms,
                "renewed_at_ms": self.view.renewed_at_ms,
                "ttl_ms": self.view.ttl_ms,
            },
        )

    @classmethod
    def decode(cls, value: bytes) -> Lease:
        record = codec.decode("Lease", value)
        view = LeaseView(
            holder=record["holder"],
            epoch=record["epoch"],
            renewed_at_ms=record["renewed_at_ms"],
            ttl_ms=record["ttl_ms"],
        )
        return cls(view, record["acquired_at_ms"])
