"""What the leader decides each tick, on one snapshot (state + live members): the
assignment rounds of ``scheduler.py`` and the statuses of ``status.py``, to be written
together in one fenced transaction and then logged, one line per decision."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from crossfeed.services.coordinator import restarts, scheduler
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.members import MembersView
from crossfeed.services.coordinator.records import FeedStatus, status_key
from crossfeed.services.coordinator.status import next_status
from crossfeed.services.coordinator.writer import Record

log = logging.getLogger(__name__)

STATUS_EVERY_MS = 1000
"""Timestamps-only status changes are written at most this often per feed."""
INITIAL_DELAY_MS = 2000
"""A feed's first assignment waits until its live pullers have not changed for this long
(like Kafka's group.initial.rebalance.delay.ms): pullers starting together then get
their tasks once, instead of having them handed from one to the next while starting."""


@dataclass(frozen=True)
class Decided:
    """One tick's decisions on the snapshot ``view``."""

    view: StateView
    rounds: list[scheduler.Round]
    statuses: list[FeedStatus]

    def records(self) -> list[Record]:
        records: list[Record] = [(a.key, a.encode()) for r in self.rounds for a in r.assignments]
        return records + [(status_key(s.feed), s.encode()) for s in self.statuses]

    def log(self) -> None:
        """One line per decision (once written)."""
        for round_ in self.rounds:
            for line in round_.lines:
                log.info("%s", line)
        for status in self.statuses:
            before = self.view.statuses.get(status.feed)
            if before is None or before.state != status.state:
                why = f": {status.last_error}" if status.last_error else ""
                log.info("changefeed %s is now %s%s", status.feed, status.state, why)


class Decisions:
    """The leader's memory between decisions: since when each feed is in error, since when
    its live pullers are what they are, and the tasks held out while they restart."""

    def __init__(self, timeout_ms: int, stuck_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.stuck_ms = stuck_ms
        self.error_since: dict[str, int] = {}
        self.pullers_since: dict[str, tuple[frozenset[str], int]] = {}
        # Tasks being restarted, per feed: held out of the assignment until their owner
        # lets go (restarts.py). The leader's memory only: a new leader simply assigns them.
        self.held: dict[str, dict[int, restarts.Held]] = {}

    def decide(self, view: StateView, members: MembersView, now: int, epoch: int) -> Decided:
        live = self._schedulable(view, members, now)
        self._release_held(members, now)
        rounds = scheduler.plan(view, live, epoch, self.held)
        return Decided(view, rounds, self._next_statuses(view, members, now, epoch))

    def hold(self, feed: str, tasks: list[int], owner: dict[int, str], now: int) -> None:
        """Hold the tasks out of the assignment until their owners let go (restart)."""
        held = self.held.setdefault(feed, {})
        for s in tasks:
            held[s] = restarts.Held(owner.get(s), now)

    def _release_held(self, members: MembersView, now: int) -> None:
        for feed, held in list(self.held.items()):
            beats = {
                i: restarts.OwnerBeat(m.sent_at_ms, restarts.puller_task_numbers(feed, m.tasks))
                for i, m in members.of_role("puller", feed).items()
            }
            left = restarts.still_held(held, beats, now, self.timeout_ms)
            for s in sorted(set(held) - set(left)):
                log.info("task %s/%d let go: assigning it again (restart)", feed, s)
            if left:
                self.held[feed] = left
            else:
                del self.held[feed]

    def _schedulable(self, view: StateView, members: MembersView, now: int) -> dict[str, list[str]]:
        """Live pullers per feed, leaving out feeds waiting for their first assignment
        until their pullers have settled (INITIAL_DELAY_MS)."""
        out = {}
        for name in view.feeds:
            pullers = frozenset(members.of_role("puller", name))
            seen = self.pullers_since.get(name)
            if seen is None or seen[0] != pullers:
                seen = self.pullers_since[name] = (pullers, now)
            started = any(a.tasks for a in view.assignments.get(name, {}).values())
            if started or now - seen[1] >= INITIAL_DELAY_MS:
                out[name] = sorted(pullers)
        return out

    def _next_statuses(
        self, view: StateView, members: MembersView, now: int, epoch: int
    ) -> list[FeedStatus]:
        out = []
        for name in sorted(view.feeds):
            previous = view.statuses.get(name) or FeedStatus(name, "normal")
            if previous.state == "removed":
                continue
            if previous.state == "error":
                since = self.error_since.setdefault(name, now)
            else:
                self.error_since.pop(name, None)
                since = now
            new = next_status(
                previous,
                members.of_feed(name),
                now_ms=now,
                epoch=epoch,
                error_age_ms=now - since,
                stuck_after_ms=self.stuck_ms,
                ordered=view.feeds[name].spec.mode == "ordered",
            )
            moved = (new.state, new.last_error) != (previous.state, previous.last_error)
            due = now - previous.updated_at_ms >= STATUS_EVERY_MS
            if moved or (due and not new.same_content(previous)):
                out.append(new)
        return out
