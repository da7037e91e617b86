"""The divergent tail of a failed-over database feed: the source transactions committed
after the last one the target applied, which never reached it (docs/disaster-recovery.md,
failback). No I/O: the caller reads Debezium's transaction topic and data events.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class TailEvent:
    """A data event of a streamed transaction (snapshot rows have no xid and are no tail)."""

    xid: str
    lsn: int  # this change's LSN
    order: int  # its place in the transaction (Debezium's total_order)
    table: str  # schema.table
    op: str  # c, u, d, t
    key: dict[str, Any]
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class TailEnd:
    """A transaction's END: its xid, commit LSN, commit time and tables."""

    xid: str
    lsn: int
    ts_us: int
    tables: tuple[str, ...]


@dataclass
class DivergentTxn:
    xid: str
    commit_lsn: int
    commit_ts_us: int
    tables: tuple[str, ...]
    changes: list[TailEvent] = field(default_factory=list)

    @property
    def txn_id(self) -> str:
        return f"{self.xid}.{self.commit_lsn}"


def divergent(
    ends: Iterable[TailEnd], events: Iterable[TailEvent], after_lsn: int, tables: set[str]
) -> list[DivergentTxn]:
    """The transactions committed after commit LSN ``after_lsn`` that touched one of
    ``tables``, in commit order, each once (Debezium may send one again after a restart),
    with their changes in transaction order. An event belongs to the END of its xid with
    the smallest commit LSN at or past the event's own (an xid can be reused)."""
    by_lsn: dict[int, DivergentTxn] = {}
    for end in ends:
        if end.lsn > after_lsn and set(end.tables) & tables and end.lsn not in by_lsn:
            by_lsn[end.lsn] = DivergentTxn(end.xid, end.lsn, end.ts_us, end.tables)
    by_xid: dict[str, list[DivergentTxn]] = {}
    for txn in sorted(by_lsn.values(), key=lambda t: t.commit_lsn):
        by_xid.setdefault(txn.xid, []).append(txn)
    seen: set[tuple[str, int, int]] = set()
    for event in events:
        if event.table not in tables or (event.xid, event.lsn, event.order) in seen:
            continue
        owner = next((t for t in by_xid.get(event.xid, ()) if t.commit_lsn >= event.lsn), None)
        if owner is not None:
            seen.add((event.xid, event.lsn, event.order))
            owner.changes.append(event)
    out = sorted(by_lsn.values(), key=lambda t: t.commit_lsn)
    for txn in out:
        txn.changes.sort(key=lambda e: (e.order, e.lsn))
    return out
