"""A puller task's transactions as decisions, without I/O.

A puller task owns a fixed set of source partitions and one transactional producer on the
target cluster (its transactional.id is fixed per task). Each transaction holds what was
read since the last commit — copies into the target topics, dead letters, OffsetSyncs —
and, last, one ResolvedMark per source partition carrying ``next_offset``, the position to
resume from. Data and positions commit together, so the marks on the target are the one
truth about how far the task got (crossfeed/positions.py reads them back).

The I/O loop around this machine (services/puller/task.py) reads, produces and commits;
this module says:

* which records to take: one already taken in this run is skipped (a re-fetch);
* when the open transaction is due: enough records or bytes, or old enough, or — with
  nothing read — time for marks anyway so resolved_ts advances;
* what the marks of a sealed transaction say: the positions read through;
* what to do once a commit's outcome is known (:meth:`TaskTxn.finished`).

Phases: ``IDLE`` (no transaction) → ``OPEN`` (records taken) → ``COMMITTING`` (sealed: the
marks are written, the commit is under way; records read meanwhile are *held* for the next
transaction and sent only once this one is settled) → ``IDLE`` or ``OPEN`` again, or
``DEAD``.

Invariants (property-tested in tests/unit/core/test_task_txn.py against a model target):

A. One transaction at a time: nothing may be sent while a commit is under way
   (:meth:`TaskTxn.may_send`), and a new one is never sealed before the last one settles.
B. ``committed <= sealed <= next`` per partition, and none of them goes backwards while
   the task lives.
C. A task never trusts its own memory after a failure. A commit that failed may still
   have landed (the broker got the EndTxn, the answer was lost), and an abort that
   "succeeded" has been seen to leave the broker's transaction open after an outage. So
   every failure ends the task (``DEAD``): it is started again with a new producer, whose
   ``init_transactions`` settles whatever the old one left, and resumes from the marks on
   the target. Fenced — another instance owns the task now — it is dropped, not restarted
   here; the assignment decides who runs it.
D. With C, every source record lands in the target exactly once and in order, whatever
   fails when: records of a committed transaction are never taken again (the marks
   resume after them), records of a failed one are taken again by the next owner.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

P = TypeVar("P", bound=Hashable)

MAX_BACKOFF_S: Final = 10.0
"""Longest pause before a failed task starts again (the target may be away a while)."""


class Phase(enum.Enum):
    IDLE = "idle"
    OPEN = "open"
    COMMITTING = "committing"
    DEAD = "dead"


_DEAD = Phase.DEAD


class Outcome(enum.Enum):
    """How a commit ended, as far as the client can tell."""

    COMMITTED = "committed"
    FENCED = "fenced"  # another producer with the task's transactional.id took over
    FAILED = "failed"  # anything else: the commit may or may not have landed


class Next(enum.Enum):
    GO_ON = "go on"
    RESTART = "restart"  # new producer, positions from the marks on the target
    DROP = "drop"  # fenced: another owner runs the task


@dataclass(frozen=True)
class Decision:
    next: Next
    reason: str
    backoff_s: float = 0.0


@dataclass(frozen=True)
class Limits:
    max_records: int
    max_bytes: int
    marks_interval_s: float
    """With nothing read, marks are still committed this often (resolved_ts advances)."""


@dataclass
class TaskTxn(Generic[P]):
    """The transactions of one task; ``P`` names a source partition."""

    limits: Limits
    committed: dict[P, int] = field(default_factory=dict)
    """Next offset per partition as of the last commit (what the marks on the target say)."""
    sealed: dict[P, int] = field(default_factory=dict)
    """As of the transaction under way (equal to committed when none is)."""
    next: dict[P, int] = field(default_factory=dict)
    """The next offset to take per partition (past what the open transaction holds)."""
    phase: Phase = Phase.IDLE
    opened_at: float | None = None
    """When the first record not yet sealed was taken."""
    records: int = 0
    """Records (and bytes, below) taken and not yet sealed."""
    bytes: int = 0
    last_commit: float = 0.0
    failures: int = 0
    """Failures in a row; carried over by the caller to the restarted task (backoff)."""

    def add_partition(self, partition: P, offset: int) -> None:
        """A partition joins the task at ``offset`` (recovered, or the feed's start)."""
        if partition in self.next:
            raise ValueError(f"partition {partition!r} is already part of the task")
        self.committed[partition] = self.sealed[partition] = self.next[partition] = offset

    def take(self, partition: P, offset: int, size: int, now: float) -> bool:
        """A record read at ``offset``: True if it belongs to the open (or next)
        transaction, False if it was taken already (a re-fetch after a rewind). Called
        once per record: kept to a few dictionary and attribute operations."""
        if self.phase is _DEAD:
            self._alive()
        positions = self.next
        if offset < positions[partition]:
            return False
        positions[partition] = offset + 1
        self.records += 1
        self.bytes += size
        if self.opened_at is None:
            self.opened_at = now
        if self.phase is Phase.IDLE:
            self.phase = Phase.OPEN
        return True

    def skip_to(self, partition: P, offset: int) -> None:
        """The reader is past ``offset`` without records for it (aborted source
        transactions, control markers, compaction): the marks carry the position on."""
        if offset > self.next[partition]:
            self.next[partition] = offset

    def may_send(self) -> bool:
        """Invariant A: records are held, not sent, while a commit is under way."""
        return self.phase in (Phase.IDLE, Phase.OPEN)

    def due_in(self, now: float, interval_s: float) -> float | None:
        """Seconds until the open transaction is due by age; None while no record waits
        to be sealed or a commit is under way."""
        if self.phase is not Phase.OPEN or self.opened_at is None:
            return None
        return self.opened_at + interval_s - now

    def due(self, now: float, interval_s: float) -> bool:
        """Time to seal? ``interval_s``: how long a transaction may stay open now."""
        if self.phase is Phase.OPEN:
            age_left = self.due_in(now, interval_s)
            return (
                self.records >= self.limits.max_records
                or self.bytes >= self.limits.max_bytes
                or (age_left is not None and age_left <= 0)
            )
        if self.phase is Phase.IDLE:
            return bool(self.next) and now - self.last_commit >= self.limits.marks_interval_s
        return False

    def seal(self) -> dict[P, int]:
        """End the open transaction; returns the positions its marks carry. Records
        taken from now on belong to the next one."""
        self._alive()
        if self.phase is Phase.COMMITTING:
            raise RuntimeError("a commit is already under way")
        self.sealed = dict(self.next)
        self.phase = Phase.COMMITTING
        self.opened_at = None
        self.records = self.bytes = 0
        return dict(self.sealed)

    def finished(self, outcome: Outcome, now: float, detail: str = "") -> Decision:
        """The sealed transaction's outcome, and what the task does next."""
        if self.phase is not Phase.COMMITTING:
            raise RuntimeError(f"no commit under way (phase {self.phase.value})")
        if outcome is Outcome.COMMITTED:
            # update, not replace: a partition added during the commit keeps its start.
            self.committed.update(self.sealed)
            self.failures = 0
            self.last_commit = now
            # Records held during the commit form the next transaction, opened when the
            # first of them was taken (seal cleared opened_at; take set it again).
            self.phase = Phase.OPEN if self.opened_at is not None else Phase.IDLE
            return Decision(Next.GO_ON, "committed")
        return self.fail(outcome, detail)

    def fail(self, outcome: Outcome, detail: str = "") -> Decision:
        """A failure at any point (sending, sealing, committing): the task ends
        (invariant C)."""
        self.phase = Phase.DEAD
        self.next = dict(self.committed)
        self.sealed = dict(self.committed)
        self.opened_at = None
        self.records = self.bytes = 0
        if outcome is Outcome.FENCED:
            return Decision(Next.DROP, f"fenced: another instance owns the task ({detail})")
        self.failures += 1
        backoff = min(MAX_BACKOFF_S, 0.25 * 2 ** (self.failures - 1))
        return Decision(
            Next.RESTART,
            f"transaction failed ({detail}); a new producer resumes from the marks on the target",
            backoff_s=backoff if self.failures > 1 else 0.0,
        )

    def _alive(self) -> None:
        if self.phase is Phase.DEAD:
            raise RuntimeError("the task ended after a failure; start a new one")
