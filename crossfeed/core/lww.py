"""Last writer wins between two databases that both take writes (an active-active pair,
docs/active-active.md). Pure logic: the sink reads what the target holds for the keys of
a batch, asks :func:`resolve` what each key's changes do, and writes the answer.

The rule, the same on both sides:

* every write has a :data:`Stamp`: its source transaction's commit time (µs) and the name
  of the side that made it. A greater stamp wins; equal times go to the greater side name
  (compared as bytes), so both sides pick the same winner;
* an upsert is applied if its stamp is greater than the row's (and, where the row is gone,
  than its tombstone's); otherwise it is skipped: a conflict *lost*. Applied over a row
  last written on the target side itself, it is a conflict *won*;
* a delete removes a row older than it and leaves a tombstone, so an older upsert arriving
  later does not bring the row back;
* a snapshot row (the initial copy) fills in only where the key has neither row nor
  tombstone: it never overwrites;
* a counter column takes the difference its source transaction made, win or lose (its
  ``deltas``), so concurrent changes on both sides all count. A row inserted takes the
  counter's value as written.

Changes of one key are resolved in commit order; keys are independent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

Stamp = tuple[int, bytes]
"""(source commit time µs, side name as bytes): the greater wins."""

APPLIED: Final = "applied"
WON: Final = "won"
LOST: Final = "lost"
KEPT: Final = "kept"


def stamp(ts_us: int, side: str) -> Stamp:
    return (ts_us, side.encode())


@dataclass(frozen=True, slots=True)
class Held:
    """What the target holds for a key before the batch."""

    row: Stamp | None  # the row's last write (None: no row)
    counters: Mapping[str, Any] = field(default_factory=dict)  # the row's counter values
    tomb: Stamp | None = None  # the key's tombstone


@dataclass(frozen=True, slots=True)
class Change:
    """One replicated change of a key."""

    op: str  # upsert or delete
    stamp: Stamp
    values: Mapping[str, Any] = field(default_factory=dict)  # upsert: the row as written
    deltas: Mapping[str, Any] | None = None  # counter column -> new - old
    snapshot: bool = False
    counters_only: bool = False  # it sets nothing but counters (besides the key)


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: str  # APPLIED, WON, LOST or KEPT
    winner: Stamp | None = None  # LOST: the write that beat it
    by: str = ""  # LOST: "row" or "delete"


@dataclass(slots=True)
class Result:
    """What to write for one key once its changes are resolved."""

    verdicts: list[Verdict]
    exists: bool  # a row at the end
    stamp: Stamp | None  # the row's last write at the end
    values: dict[str, Any] | None = None  # the whole row to write (counters absolute)
    counters: dict[str, Any] | None = None  # only these counters to set (the row stays)
    delete: bool = False  # the row there at the start is removed
    tomb: Stamp | None = None  # a newer tombstone to write

    @property
    def lost(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.outcome == LOST]


def _add(counters: dict[str, Any], deltas: Mapping[str, Any] | None) -> bool:
    if not deltas:
        return False
    for column, delta in deltas.items():
        counters[column] = (counters.get(column) or 0) + (delta or 0)
    return True


def resolve(
    held: Held, changes: Sequence[Change], local: bytes, counter_columns: frozenset[str]
) -> Result:
    """What ``changes`` (one key's, in commit order) do to what the target holds;
    ``local``: the target side's name, as bytes; ``counter_columns``: the table's counters."""
    exists = held.row is not None
    row = held.row
    tomb = held.tomb
    counters = dict(held.counters)
    values: dict[str, Any] | None = None  # set once a change wins or inserts
    counted = False  # counters changed with the row otherwise left as it was
    verdicts: list[Verdict] = []
    for change in changes:
        if change.op == "delete":
            if exists:
                assert row is not None
                if change.stamp > row:
                    verdicts.append(Verdict(WON if row[1] == local else APPLIED))
                    exists, values, counted, counters = False, None, False, {}
                    tomb = max(tomb, change.stamp) if tomb else change.stamp
                else:
                    verdicts.append(Verdict(LOST, row, "row"))
            else:
                verdicts.append(Verdict(APPLIED))
                tomb = max(tomb, change.stamp) if tomb else change.stamp
            continue
        if exists:
            assert row is not None
            if change.snapshot:
                verdicts.append(Verdict(KEPT))
            elif change.stamp > row:
                verdicts.append(Verdict(WON if row[1] == local else APPLIED))
                _add(counters, change.deltas)
                values = {**change.values, **counters}
                row, counted = change.stamp, False
            else:
                # a change of counters alone loses nothing: its differences all count
                lost = not (change.counters_only and change.deltas)
                verdicts.append(Verdict(LOST, row, "row") if lost else Verdict(APPLIED))
                if _add(counters, change.deltas):
                    if values is not None:
                        values.update(counters)
                    else:
                        counted = True
            continue
        if tomb is not None and change.snapshot:
            verdicts.append(Verdict(KEPT))  # deleted here since: not brought back
        elif tomb is not None and change.stamp <= tomb:
            verdicts.append(Verdict(LOST, tomb, "delete"))
        else:
            verdicts.append(Verdict(WON if tomb is not None and tomb[1] == local else APPLIED))
            values = dict(change.values)
            counters = {c: values[c] for c in counter_columns if c in values}
            exists, row, counted = True, change.stamp, False
    result = Result(verdicts, exists, row if exists else None)
    if exists and values is not None:
        result.values = values
    elif exists and counted:
        result.counters = counters
    result.delete = held.row is not None and not exists
    if tomb != held.tomb:
        result.tomb = tomb
    return result
