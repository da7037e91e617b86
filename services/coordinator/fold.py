"""Folding ``_crossfeed.state`` records, in log order, into the coordinator's view — pure.

Folding rules:

* ``lease/coordinator`` records are folded with :func:`crossfeed.core.lease.accept_write`
  (Kafka has no compare-and-set: the log is the arbiter). *Compaction caveat:* a compacted
  topic keeps only the newest lease record, so a reader starting from the beginning may
  never see its predecessors; the first lease record a store reads is therefore taken as
  the starting point, whatever its epoch. That is only safe if the newest lease record is
  always an accepted one, which the writer guarantees: lease records are written in
  Kafka transactions under one transactional.id shared by all coordinators, and a
  candidate fences every other writer and re-reads the log to its end before it writes
  (``writer.py``) — so no committed lease write was decided on a stale view.
* Status and assignment records carry the writer's leader epoch; one below the highest
  lease epoch read so far is a deposed leader's late write and is ignored (the
  transactional fencing above means it should never be committed in the first place).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from crossfeed.core.lease import accept_write
from crossfeed.services.coordinator.records import (
    LEASE_KEY,
    Assignment,
    FeedStatus,
    Lease,
    StoredFeed,
)
from crossfeed.wire import codec

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StateView:
    """What ``_crossfeed.state`` says at one point of the log, for one tick's decisions."""

    feeds: Mapping[str, StoredFeed] = field(default_factory=dict)
    statuses: Mapping[str, FeedStatus] = field(default_factory=dict)
    # feed -> instance_id -> the instance's puller assignment for that feed
    assignments: Mapping[str, Mapping[str, Assignment]] = field(default_factory=dict)
    lease: Lease | None = None

    def state(self, feed: str) -> str | None:
        status = self.statuses.get(feed)
        return status.state if status else None


class StateFold:
    """The latest feeds, statuses, puller assignments and lease, record by record.

    ``apply`` raises ``codec.CodecError`` (a ValueError) for a value it cannot read.
    """

    def __init__(self) -> None:
        self._feeds: dict[str, StoredFeed] = {}
        self._statuses: dict[str, FeedStatus] = {}
        self._assignments: dict[str, dict[str, Assignment]] = {}
        self._lease: Lease | None = None
        self._max_epoch = 0

    def apply(self, key: str, value: bytes | None) -> None:
        """Fold the next record of the log (``value`` None: a tombstone)."""
        kind, _, rest = key.partition("/")
        if kind == "lease" and key == LEASE_KEY and value is not None:
            self._fold_lease(Lease.decode(value))
        elif kind == "feed":
            if value is None:
                self._feeds.pop(rest, None)
            else:
                self._feeds[rest] = StoredFeed.from_record(codec.decode("FeedSpec", value))
        elif kind == "status" and value is not None:
            status = FeedStatus.decode(value)
            if self._fenced(status.leader_epoch, key):
                return
            self._statuses[status.feed] = status
        elif kind == "assignment":
            feed, _, role_instance = rest.partition("/")
            role, _, instance = role_instance.partition("/")
            if role != "puller":
                return
            if value is None:
                self._assignments.get(feed, {}).pop(instance, None)
                return
            assignment = Assignment.decode(value)
            if self._fenced(assignment.epoch, key):
                return
            self._assignments.setdefault(feed, {})[instance] = assignment

    def _fold_lease(self, proposed: Lease) -> None:
        current = self._lease
        if current is None or accept_write(current.view, proposed.view):
            # The first lease record read is the starting point (see the module doc).
            self._lease = proposed
            self._max_epoch = max(self._max_epoch, proposed.view.epoch)
        else:
            log.debug(
                "lease write by %s for epoch %d not accepted (current: %s, epoch %d)",
                proposed.view.holder,
                proposed.view.epoch,
                current.view.holder,
                current.view.epoch,
            )

    def _fenced(self, epoch: int, key: str) -> bool:
        if epoch < self._max_epoch:
            log.warning(
                "ignoring %s written by a deposed leader (epoch %d < %d)",
                key,
                epoch,
                self._max_epoch,
            )
            return True
        return False

    def view(self) -> StateView:
        """An immutable snapshot of everything folded so far."""
        return StateView(
            feeds=MappingProxyType(dict(self._feeds)),
            statuses=MappingProxyType(dict(self._statuses)),
            assignments=MappingProxyType(
                {feed: MappingProxyType(dict(a)) for feed, a in self._assignments.items()}
            ),
            lease=self._lease,
        )
