"""Leadership by lease, and liveness from heartbeats: decisions only, no I/O.

The I/O layer keeps a lease record on a Kafka topic and reads it back; this module says
what to write (:func:`decide`), whether a write takes effect (:func:`accept_write`), and
whether a command is stale (:func:`is_fenced`). Times are milliseconds passed in.

Invariants:

A. A lease is *live* at ``now`` iff ``now < renewed_at_ms + ttl_ms`` (expiry is exclusive).
B. :func:`accept_write` accepts an *acquire* only with ``epoch == current epoch + 1`` (1 when
   there is no lease) and only if the current lease is expired at the proposed
   ``renewed_at_ms`` or already held by the proposer; it accepts a *renew* only from the
   current holder at the current epoch while its lease is still live at the proposed
   ``renewed_at_ms``, never moving ``renewed_at_ms`` backwards (a holder whose lease
   expired must acquire a new epoch, so commands sent in the gap are fenced).
C. Hence epochs only grow, each epoch has exactly one holder, and — with one clock —
   two candidates never both hold a live lease (:func:`holds_lease`) at the same moment.
   Simulated in the property tests.
D. A command carrying an epoch lower than the latest known one is fenced.

Rules for the I/O layer:

* Every reader applies :func:`accept_write` to the lease records in log order, starting
  from the same state; the log is the arbiter (Kafka has no compare-and-set). A candidate
  learns whether it won by reading its own write back. The fold needs the full order, so
  the topic must not let compaction keep a rejected write in place of an accepted one.
* The holder counts its lease from the time it *sent* the write (``renewed_at_ms`` it
  proposed) and stops acting as leader at expiry, before anyone may acquire.
* Clock skew between machines shortens safety by the skew: keep ``ttl_ms`` well above it,
  and renew every ``ttl_ms / 3`` or so.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeaseView:
    """The lease as last written: who holds it, at which epoch, until when."""

    holder: str
    epoch: int
    renewed_at_ms: int
    ttl_ms: int

    def __post_init__(self) -> None:
        if not self.holder:
            raise ValueError("lease holder must not be empty")
        if self.epoch < 1:
            raise ValueError(f"lease epoch must be >= 1, got {self.epoch}")
        if self.ttl_ms <= 0:
            raise ValueError(f"lease ttl_ms must be > 0, got {self.ttl_ms}")

    @property
    def expires_at_ms(self) -> int:
        """First moment the lease is no longer live."""
        return self.renewed_at_ms + self.ttl_ms

    def is_live(self, now_ms: int) -> bool:
        """Invariant A."""
        return now_ms < self.expires_at_ms


class LeaseAction(enum.Enum):
    """What a candidate does after looking at the lease."""

    RENEW = "renew"
    """I hold a live lease: write it again at the same epoch."""
    ACQUIRE = "acquire"
    """No lease, or an expired one: try to take it at the next epoch."""
    FOLLOW = "follow"
    """Someone else holds a live lease: stand by until it expires."""


@dataclass(frozen=True, slots=True)
class LeaseDecision:
    """The outcome of :func:`decide`; ``proposed`` is the record to write (None to follow)."""

    action: LeaseAction
    proposed: LeaseView | None
    holder: str | None
    epoch: int
    reason: str
    """One line for the log, e.g. ``"acquire epoch 8: lease of coord-1 expired 2500 ms ago"``."""


def decide(view: LeaseView | None, me: str, now_ms: int, ttl_ms: int) -> LeaseDecision:
    """What candidate ``me`` should do at ``now_ms`` given the lease it last read."""
    if view is None:
        proposed = LeaseView(me, 1, now_ms, ttl_ms)
        return LeaseDecision(LeaseAction.ACQUIRE, proposed, me, 1, "acquire epoch 1: no lease yet")
    if view.is_live(now_ms):
        if view.holder == me:
            proposed = LeaseView(me, view.epoch, now_ms, ttl_ms)
            return LeaseDecision(
                LeaseAction.RENEW,
                proposed,
                me,
                view.epoch,
                f"renew epoch {view.epoch}: {view.expires_at_ms - now_ms} ms were left",
            )
        return LeaseDecision(
            LeaseAction.FOLLOW,
            None,
            view.holder,
            view.epoch,
            f"follow {view.holder} (epoch {view.epoch}), "
            f"lease live for {view.expires_at_ms - now_ms} ms",
        )
    epoch = view.epoch + 1
    proposed = LeaseView(me, epoch, now_ms, ttl_ms)
    return LeaseDecision(
        LeaseAction.ACQUIRE,
        proposed,
        me,
        epoch,
        f"acquire epoch {epoch}: lease of {view.holder} (epoch {view.epoch}) expired "
        f"{now_ms - view.expires_at_ms} ms ago",
    )


def accept_write(current: LeaseView | None, proposed: LeaseView) -> bool:
    """Whether ``proposed`` takes effect on top of ``current`` (invariant B)."""
    current_epoch = current.epoch if current is not None else 0
    if proposed.epoch == current_epoch + 1:
        return (
            current is None
            or current.holder == proposed.holder
            or not current.is_live(proposed.renewed_at_ms)
        )
    return (
        current is not None
        and proposed.epoch == current.epoch
        and proposed.holder == current.holder
        and current.renewed_at_ms <= proposed.renewed_at_ms
        and current.is_live(proposed.renewed_at_ms)
    )


def holds_lease(view: LeaseView | None, me: str, now_ms: int) -> bool:
    """True while ``me`` may act as leader according to ``view``."""
    return view is not None and view.holder == me and view.is_live(now_ms)


def is_fenced(command_epoch: int, current_epoch: int) -> bool:
    """True for a command from a deposed leader: its epoch is below the latest known.

    A *higher* epoch is not fenced: the receiver has not seen the new lease yet and should
    adopt the command's epoch as its latest known one.
    """
    return command_epoch < current_epoch


@dataclass(frozen=True, slots=True)
class _Beat:
    sent_at_ms: int
    received_at_ms: int


class LivenessTracker:
    """Last heartbeat per instance; who is alive, who has been silent too long.

    Silence is measured on ``received_at_ms`` (the tracker's own clock), so clock skew
    between machines does not matter. ``sent_at_ms`` orders heartbeats of one instance: an
    older one arriving late (or replayed from the heartbeats topic) is ignored. When
    replaying the topic at start-up, pass the replay time as ``received_at_ms`` to give
    every known instance one timeout of grace, or ``sent_at_ms`` to trust the senders'
    clocks.
    """

    __slots__ = ("_beats", "_left")

    def __init__(self) -> None:
        self._beats: dict[str, _Beat] = {}
        self._left: dict[str, int] = {}

    def heartbeat(self, instance_id: str, *, sent_at_ms: int, received_at_ms: int) -> bool:
        """Record a heartbeat; returns False if it was ignored as stale."""
        last = self._beats.get(instance_id)
        if last is not None and sent_at_ms <= last.sent_at_ms:
            return False
        left_at = self._left.get(instance_id)
        if left_at is not None:
            if sent_at_ms <= left_at:
                return False
            del self._left[instance_id]
        self._beats[instance_id] = _Beat(sent_at_ms, received_at_ms)
        return True

    def leave(self, instance_id: str, *, sent_at_ms: int) -> None:
        """Graceful leave: the instance is gone at once; heartbeats it sent before (and
        at) ``sent_at_ms`` that arrive late do not bring it back."""
        self._beats.pop(instance_id, None)
        self._left[instance_id] = max(sent_at_ms, self._left.get(instance_id, sent_at_ms))

    def forget(self, instance_id: str) -> None:
        """Drop an instance after its tasks were reassigned (a new heartbeat re-adds it)."""
        self._beats.pop(instance_id, None)

    def instances(self) -> list[str]:
        """Every instance with a recorded heartbeat, sorted."""
        return sorted(self._beats)

    def age_ms(self, instance_id: str, now_ms: int) -> int | None:
        """Milliseconds since the instance was last heard from, or None if unknown."""
        beat = self._beats.get(instance_id)
        return None if beat is None else now_ms - beat.received_at_ms

    def expired(self, now_ms: int, timeout_ms: int) -> list[str]:
        """Instances silent for longer than ``timeout_ms``, sorted."""
        return sorted(
            i for i, beat in self._beats.items() if now_ms - beat.received_at_ms > timeout_ms
        )

    def alive(self, now_ms: int, timeout_ms: int) -> list[str]:
        """Instances heard from within ``timeout_ms``, sorted; the complement of expired."""
        return sorted(
            i for i, beat in self._beats.items() if now_ms - beat.received_at_ms <= timeout_ms
        )
