"""Who leads: the coordinator lease in ``_crossfeed.state`` (seed 004: heartbeats,
leases, fencing), driven one :meth:`Leadership.step` per tick.

The decisions are :mod:`crossfeed.core.lease`'s; this module does the I/O around them:

* A leader renews every ``ttl / 4`` and counts its lease from the renewal it sent; it
  stops acting as leader the moment that lease is no longer live (:meth:`is_leader` is
  checked right before every write). When its writer is fenced it steps down and, in
  the same step, competes again: with its lease still live (the fence came from a
  candidate that lost the race) it takes the writer back, else it follows.
* A standby follows while the lease is live. When it sees the lease expired it reads the
  log to its end (its view may lag), decides again, opens the writer — which fences every
  other coordinator's writer — reads to the end once more, decides again and only then
  writes the lease at the next epoch. It learns it won by reading its write back.
* A deposed leader that wakes up after SIGSTOP finds its own lease expired: it stops
  leading before anything else, and re-reads the log before it would compete again; its
  writer is already fenced, so even a write it had started cannot be committed.
* A graceful stop releases the lease (a renewal with a 1 ms ttl), so a standby takes over
  at its next tick instead of after the ttl.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from crossfeed.core.lease import LeaseAction, LeaseDecision, LeaseView, decide, holds_lease
from crossfeed.services.coordinator import metrics
from crossfeed.services.coordinator.records import LEASE_KEY, Lease
from crossfeed.services.coordinator.store import StateStore
from crossfeed.services.coordinator.writer import Fenced, NotLeader, StateWriter, WriteFailed

log = logging.getLogger(__name__)

SAFETY_MS = 100
"""A leader stops writing this long before its lease expires (a write takes time too)."""


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class LeaderInfo:
    """Who leads, as this instance knows it (None fields: no live lease)."""

    me: str
    leading: bool
    holder: str | None
    epoch: int
    expires_in_ms: int | None


class Leadership:
    """The lease loop of one coordinator instance."""

    def __init__(
        self,
        store: StateStore,
        writer: StateWriter,
        me: str,
        ttl_ms: int,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.writer = writer
        self.me = me
        self.ttl_ms = ttl_ms
        self.renew_every_ms = max(ttl_ms // 4, 1)
        self.clock = clock
        self.leading_epoch: int | None = None
        self.last_renewal_ms = 0
        self._followed: tuple[str, int] | None = None

    # -- what others ask ---------------------------------------------------------------

    def lease(self) -> LeaseView | None:
        lease = self.store.snapshot().lease
        return lease.view if lease else None

    def is_leader(self) -> bool:
        """True while this instance may write: it leads and its lease is live (with margin)."""
        view = self.lease()
        return (
            self.leading_epoch is not None
            and self.writer.is_open
            and view is not None
            and view.epoch == self.leading_epoch
            and holds_lease(view, self.me, self.clock() + SAFETY_MS)
        )

    def info(self) -> LeaderInfo:
        view = self.lease()
        now = self.clock()
        live = view is not None and view.is_live(now)
        return LeaderInfo(
            me=self.me,
            leading=self.is_leader(),
            holder=view.holder if view is not None and live else None,
            epoch=view.epoch if view is not None else 0,
            expires_in_ms=view.expires_at_ms - now if view is not None and live else None,
        )

    # -- one tick ------------------------------------------------------------------------

    def step(self) -> None:
        """Renew, follow or compete, once; never raises for Kafka trouble (logs it)."""
        try:
            try:
                self._step()
            except Fenced as err:
                # Most often a candidate that lost the race to us opened its writer just
                # before it saw our lease. Take the writer back in this same tick (our
                # lease is live, so the decision is RENEW): waiting for the next tick
                # would refuse every request in between.
                self.step_down(str(err))
                self._step()
        except Fenced as err:
            self.step_down(str(err))
        except (WriteFailed, NotLeader) as err:
            log.warning("lease round failed: %s", err)
            if self.leading_epoch is not None and not self.is_leader():
                self.step_down(f"could not renew the lease ({err})")
        finally:
            metrics.ROLE.set(1 if self.is_leader() else 0)
            view = self.lease()
            metrics.LEASE_EPOCH.set(view.epoch if view else 0)

    def _decide(self) -> LeaseDecision:
        return decide(self.lease(), self.me, self.clock(), self.ttl_ms)

    def _step(self) -> None:
        decision = self._decide()
        if decision.action is LeaseAction.FOLLOW:
            self._follow(decision)
            return
        if (
            decision.action is LeaseAction.RENEW
            and decision.epoch == self.leading_epoch
            and self.writer.is_open
        ):
            if self.clock() - self.last_renewal_ms >= self.renew_every_ms:
                self._renew()
            return
        if decision.action is LeaseAction.ACQUIRE and self.leading_epoch is not None:
            self.step_down(f"own lease of epoch {self.leading_epoch} expired before renewal")
        self.leading_epoch = None
        self._compete()

    def _follow(self, decision: LeaseDecision) -> None:
        if self.leading_epoch is not None:
            self.step_down(f"{decision.holder} holds the lease at epoch {decision.epoch}")
        followed = (str(decision.holder), decision.epoch)
        if followed != self._followed:
            self._followed = followed
            log.info("standby: %s", decision.reason)

    def _renew(self) -> None:
        assert self.leading_epoch is not None
        metrics.LEASE_RENEWALS.inc()
        current = self.store.snapshot().lease
        now = self.clock()
        view = LeaseView(self.me, self.leading_epoch, now, self.ttl_ms)
        acquired = current.acquired_at_ms if current else now
        self.writer.write(
            [(LEASE_KEY, Lease(view, acquired).encode())],
            guard=lambda: holds_lease(self.lease(), self.me, self.clock()),
        )
        self.last_renewal_ms = now

    def _compete(self) -> None:
        """Acquire (or take back) the lease, fencing other writers first (module doc)."""
        if not self.store.sync():
            log.warning("cannot read the state topic to its end; not competing this tick")
            return
        decision = self._decide()
        if decision.action is LeaseAction.FOLLOW:
            self._follow(decision)
            return
        previous = self.store.snapshot().lease
        self.writer.open()  # fences every other writer, then reads to the end again
        decision = self._decide()
        if decision.action is LeaseAction.FOLLOW or decision.proposed is None:
            self.writer.close()
            self._follow(decision)
            return
        proposed = decision.proposed
        if decision.action is LeaseAction.ACQUIRE:
            acquired_at = proposed.renewed_at_ms
        else:  # RENEW: our own live lease, after a restart or after being fenced
            lease = self.store.snapshot().lease
            acquired_at = lease.acquired_at_ms if lease else proposed.renewed_at_ms
        self.writer.write([(LEASE_KEY, Lease(proposed, acquired_at).encode())], guard=lambda: True)
        won = self.lease()
        if won is None or won.holder != self.me or won.epoch != proposed.epoch:
            self.writer.close()
            log.info("lost the election for epoch %d to %s", proposed.epoch, won and won.holder)
            return
        self.leading_epoch = proposed.epoch
        self.last_renewal_ms = proposed.renewed_at_ms
        self._followed = None
        if decision.action is LeaseAction.RENEW:
            log.info("leader again at epoch %d (took the state writer back)", proposed.epoch)
            return
        if previous is not None:
            metrics.LEASE_EXPIRED.inc()
            if previous.view.holder != self.me:
                metrics.FAILOVERS.inc()
                gap_ms = proposed.renewed_at_ms - previous.view.renewed_at_ms
                metrics.LEADER_FAILOVER_SECONDS.observe(max(gap_ms, 0) / 1000)
        log.info("became leader: %s", decision.reason)

    def step_down(self, why: str) -> None:
        """Stop leading now (fenced, lease lost); the next step may compete again."""
        if self.leading_epoch is not None:
            log.warning("stepping down as leader of epoch %d: %s", self.leading_epoch, why)
        self.leading_epoch = None
        self.writer.close()
        metrics.ROLE.set(0)

    def fenced(self, err: Fenced) -> bool:
        """Our writer was fenced. A candidate that lost the race to us fences us too when
        it opens its writer just before it sees our lease; so step down, then compete at
        once: with our lease still live we take the writer back, otherwise we follow.
        Returns whether we lead again."""
        self.step_down(str(err))
        self.step()
        return self.is_leader()

    def release(self) -> None:
        """Graceful stop: give the lease up so a standby takes over at once."""
        if not self.is_leader() or self.leading_epoch is None:
            self.writer.close()
            return
        current = self.store.snapshot().lease
        now = self.clock()
        view = LeaseView(self.me, self.leading_epoch, now, 1)
        acquired = current.acquired_at_ms if current else now
        try:
            self.writer.write([(LEASE_KEY, Lease(view, acquired).encode())], guard=self.is_leader)
            log.info("released the lease of epoch %d", self.leading_epoch)
        except (Fenced, NotLeader, WriteFailed) as err:
            log.warning("could not release the lease: %s", err)
        self.leading_epoch = None
        self.writer.close()
        metrics.ROLE.set(0)
