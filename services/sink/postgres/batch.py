"""Row changes waiting to be written, merged per row (no I/O).

Within one database transaction only the last change of a row matters (nothing between
is ever visible), so a batch keeps one change per (table, key): a bank's thousand
accounts updated ten thousand times cost a thousand rows. A change that sets other
columns than the one it replaces cannot be merged (the columns it leaves alone must keep
the earlier change's values): :meth:`Batch.add` says so, and the sink writes the batch
first. Written by statement shape: one ``executemany`` per (table, op, columns).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from crossfeed.services.sink.postgres.mapping import RowChange


class Batch:
    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple[Any, ...], RowChange]] = {}
        self.rows = 0  # distinct rows held
        self.changes = 0  # changes added (merged ones included)

    def __len__(self) -> int:
        return self.rows

    def add(self, change: RowChange) -> bool:
        """Hold ``change``; False (and nothing held) when it must wait for a write of
        what is held (it cannot merge with the change of its row held here)."""
        return self.add_many((change,), 0) == 1

    def add_many(self, changes: Sequence[RowChange], start: int) -> int:
        """:meth:`add` of ``changes[start:]`` in order, in one loop instead of a call per
        change (a source transaction completing joins the batch); returns the index of
        the first one not held (``len(changes)``: all held)."""
        tables = self.tables
        for i in range(start, len(changes)):
            change = changes[i]
            rows = tables.get(change.table)
            if rows is None:
                rows = tables[change.table] = {}
            previous = rows.get(change.key)
            if previous is None:
                self.rows += 1
            elif (
                previous.op == change.op == "upsert"
                and previous.shape != change.shape
                and not set(previous.values) <= set(change.values)
            ):
                return i
            rows[change.key] = change
            self.changes += 1
        return len(changes)

    def groups(self) -> Iterator[tuple[str, tuple[str, tuple[str, ...]], list[RowChange]]]:
        """(table, shape, changes) for each statement to run."""
        for table, rows in self.tables.items():
            shapes: dict[tuple[str, tuple[str, ...]], list[RowChange]] = {}
            for change in rows.values():
                shapes.setdefault(change.shape, []).append(change)
            for shape, changes in shapes.items():
                yield table, shape, changes

    def all(self) -> Iterator[RowChange]:
        for rows in self.tables.values():
            yield from rows.values()

    def clear(self) -> None:
        self.tables.clear()
        self.rows = self.changes = 0
