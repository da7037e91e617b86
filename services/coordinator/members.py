"""Who is alive: every instance's last heartbeat, from ``_crossfeed.heartbeats``.

The topic is compacted and replayed from its start when a coordinator starts. Heartbeats
read during that replay are timed by their own ``sent_at_ms`` (trusting the senders'
clocks), so instances that died long ago are not taken for alive; afterwards a heartbeat
is timed by when this coordinator received it, so clock skew does not matter. A
``leaving`` heartbeat (graceful shutdown) removes the instance at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from crossfeed.core.lease import LivenessTracker
from crossfeed.membership import TopicTail
from crossfeed.wire import codec, topics

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Member:
    """One instance as its last heartbeat describes it."""

    instance_id: str
    role: str
    host: str
    pid: int
    version: str
    started_at_ms: int
    sent_at_ms: int
    tasks: tuple[str, ...]
    feeds: tuple[str, ...]
    state: str
    address: str
    checkpoints: Mapping[str, int]  # sinks: checkpoint_ts per source partition
    last_error: str
    resolved: Mapping[str, int] = field(default_factory=dict)  # pullers, sorters
    laggards: Mapping[str, int] = field(default_factory=dict)  # sorters: since, µs
    checkpoint_ts_us: int = 0  # sinks of ordered feeds: the feed's checkpoint_ts
    syncpoint_ts_us: int = 0  # database sinks: the newest syncpoint's consistency_ts
    syncpoint_at_ms: int = 0  # and its commit time in the target
    notices: tuple[str, ...] = ()  # pullers: gaps not acknowledged (not errors)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Member:
        return cls(
            instance_id=record["instance_id"],
            role=record["role"],
            host=record["host"],
            pid=record["pid"],
            version=record["version"],
            started_at_ms=record["started_at_ms"],
            sent_at_ms=record["sent_at_ms"],
            tasks=tuple(record["tasks"]),
            feeds=tuple(record["feeds"]),
            state=record["state"],
            address=record.get("address", ""),
            last_error=record.get("last_error", ""),
            **_timestamp_maps(record),
            checkpoint_ts_us=record.get("checkpoint_ts_us", 0),
            syncpoint_ts_us=record.get("syncpoint_ts_us", 0),
            syncpoint_at_ms=record.get("syncpoint_at_ms", 0),
            notices=tuple(record.get("notices", ())),
        )


LAGGARD_PREFIX = "laggard:"


def _timestamp_maps(record: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``checkpoints``, ``resolved`` and ``laggards`` of a heartbeat. A heartbeat written
    before ``resolved`` existed (0.1.0) carried a puller's or sorter's resolved_ts in
    ``checkpoints``, and a sorter's laggards there as ``laggard:<partition>``: read as
    the new fields, so a rolling upgrade shows the same status."""
    checkpoints = dict(record.get("checkpoints", {}))
    resolved = dict(record.get("resolved", {}))
    laggards = dict(record.get("laggards", {}))
    if record["role"] in ("puller", "sorter") and checkpoints and not resolved:
        for key, ts in checkpoints.items():
            if key.startswith(LAGGARD_PREFIX):
                laggards[key[len(LAGGARD_PREFIX) :]] = ts
            else:
                resolved[key] = ts
        checkpoints = {}
    return {"checkpoints": checkpoints, "resolved": resolved, "laggards": laggards}


@dataclass(frozen=True, slots=True)
class Live:
    """A live instance and how long ago it was heard from."""

    member: Member
    age_ms: int


@dataclass(frozen=True)
class MembersView:
    """Live instances at one moment (heard from within the timeout, not leaving)."""

    live: Mapping[str, Live]

    def of_role(self, role: str, feed: str | None = None) -> dict[str, Member]:
        """Live instances of ``role`` (serving ``feed``, if given), by instance id."""
        return {
            i: entry.member
            for i, entry in self.live.items()
            if entry.member.role == role and (feed is None or feed in entry.member.feeds)
        }

    def of_feed(self, feed: str) -> list[Member]:
        return [
            entry.member for _, entry in sorted(self.live.items()) if feed in entry.member.feeds
        ]

    def address_of(self, instance_id: str) -> str | None:
        entry = self.live.get(instance_id)
        return entry.member.address or None if entry else None


class Members:
    """Follows the heartbeats topic; thread-safe views of who is alive."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self._lock = threading.Lock()
        self._tracker = LivenessTracker()
        self._last: dict[str, Member] = {}
        self._tail = TopicTail(conf, topics.HEARTBEATS, self._on_record, name="heartbeats")

    def start(self) -> Members:
        self._tail.start()
        return self

    def stop(self) -> None:
        self._tail.stop()

    @property
    def caught_up(self) -> threading.Event:
        return self._tail.caught_up

    def _on_record(self, key: str, value: bytes | None) -> None:
        if value is None:
            with self._lock:
                self._tracker.forget(key)
                self._last.pop(key, None)
            return
        member = Member.from_record(codec.decode("Heartbeat", value))
        received = int(time.time() * 1000) if self._tail.caught_up.is_set() else member.sent_at_ms
        with self._lock:
            if member.state == "leaving":
                if member.instance_id in self._last and self._tail.caught_up.is_set():
                    log.info("%s %s is leaving", member.role, member.instance_id)
                self._tracker.leave(member.instance_id, sent_at_ms=member.sent_at_ms)
                self._last.pop(member.instance_id, None)
                return
            if self._tracker.heartbeat(
                member.instance_id, sent_at_ms=member.sent_at_ms, received_at_ms=received
            ):
                self._last[member.instance_id] = member

    def view(self, now_ms: int, timeout_ms: int) -> MembersView:
        with self._lock:
            live = {
                i: Live(self._last[i], self._tracker.age_ms(i, now_ms) or 0)
                for i in self._tracker.alive(now_ms, timeout_ms)
                if i in self._last
            }
        return MembersView(live)

    def ages_ms(self, now_ms: int) -> dict[str, tuple[str, int]]:
        """Every known instance (live or silent, not left): (role, ms since last heard)."""
        with self._lock:
            return {
                i: (m.role, self._tracker.age_ms(i, now_ms) or 0) for i, m in self._last.items()
            }

    def forget_silent(self, now_ms: int, older_than_ms: int) -> list[str]:
        """Drop instances silent for longer than ``older_than_ms`` (they stay in the topic)."""
        with self._lock:
            gone = self._tracker.expired(now_ms, older_than_ms)
            for i in gone:
                self._tracker.forget(i)
                self._last.pop(i, None)
        return gone
