"""Failover of an ordered feed (docs/disaster-recovery.md): what the target lost, and who
may still write to it — pure, no I/O.

**RPO.** The target holds the source's state as of a transaction boundary: the last
source transaction applied (its place in commit order) and consistency_ts. Every source
transaction known to have committed after it is lost. What is known comes from where the
failover can still read: the source cluster (dc-a's Debezium transaction topic, or the
source topics of a change producer — everything captured: the count is *exact*) or only
the feed's own copies on the target cluster (``_crossfeed.<feed>.changes``: what crossed
before dc-a was lost — the count is *at least*).

A transaction's place in commit order is its ``order``: the commit LSN for a database
captured by Debezium (crossfeed's txn id is ``<xid>.<commit lsn>``), else crossfeed's
commit_ts (strictly increasing in commit order for one producer's transactions). Copies
of one transaction read from several places (Debezium sends again after a crash, both
clusters hold it) count once, by txn id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Known:
    """A source transaction known to have committed."""

    txn: str
    order: int
    commit_ts_us: int  # the source's commit time as known (0: unknown)


@dataclass(frozen=True, slots=True)
class Rpo:
    """What a failover lost: source transactions committed after the target's state."""

    transactions: int
    exact: bool
    known_from: str
    first_lost_us: int | None
    last_lost_us: int | None
    span_s: float
    """Source time from consistency_ts to the last lost commit known (0: none lost)."""

    def text(self) -> str:
        count = f"{self.transactions}" if self.exact else f"at least {self.transactions}"
        noun = "transaction" if self.transactions == 1 else "transactions"
        span = f", {self.span_s:.3f}s of source time" if self.span_s > 0 else ""
        return f"{count} source {noun}{span} (known from {self.known_from})"


def debezium_order(txn: str) -> int | None:
    """The commit LSN of a Debezium transaction's crossfeed txn id ``<xid>.<lsn>``; None
    for any other id (a snapshot row's, a change producer's)."""
    xid, dot, lsn = txn.rpartition(".")
    if not dot or not xid.isdigit() or not lsn.isdigit():
        return None
    return int(lsn)


def lost(applied_order: int | None, consistency_ts_us: int, known: Iterable[Known]) -> list[Known]:
    """The known transactions after the applied one, once each, in commit order.

    ``applied_order`` None (nothing streamed applied yet, or an id without an order):
    those whose commit time is above consistency_ts."""
    by_txn: dict[str, Known] = {}
    for k in known:
        after = (
            k.order > applied_order
            if applied_order is not None
            else (k.commit_ts_us > consistency_ts_us)
        )
        if after and k.txn not in by_txn:
            by_txn[k.txn] = k
    return sorted(by_txn.values(), key=lambda k: (k.order, k.txn))


def rpo(
    applied_order: int | None,
    consistency_ts_us: int,
    known: Iterable[Known],
    *,
    exact: bool,
    known_from: str,
) -> Rpo:
    """The RPO of a failover whose target holds everything up to ``applied_order``."""
    gone = lost(applied_order, consistency_ts_us, known)
    stamps = [k.commit_ts_us for k in gone if k.commit_ts_us > 0]
    first = min(stamps) if stamps else None
    last = max(stamps) if stamps else None
    span = max(0, last - consistency_ts_us) / 1e6 if last is not None and consistency_ts_us else 0.0
    return Rpo(len(gone), exact, known_from, first, last, span)


def consistency_of(commit_ts_us: int, checkpoint_ts_us: int) -> int:
    """The source time the target holds exactly: the applied transaction's commit_ts, or
    the checkpoint past it (nothing committed in between)."""
    return max(commit_ts_us, checkpoint_ts_us)
