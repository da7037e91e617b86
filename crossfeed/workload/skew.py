"""Skew between partitions: records of some partitions written a fixed delay late.

Pure (no I/O, no clock: callers pass ``now``). The bank workload routes every record it
writes through a :class:`DelayLine`; records of a skewed partition — its changes and its
watermarks alike — come out ``delay`` seconds after they went in, so a later transaction
of another partition reaches Kafka before an earlier one of the skewed partition, and
the sorter really has to reorder.

Invariants (property tests in tests/unit/workload/test_workload.py):

A. Every item put in comes out exactly once (:meth:`DelayLine.due` or
   :meth:`DelayLine.drain`).
B. Items of one partition come out in the order they went in (so per-partition order,
   and a watermark's promise about what precedes it, hold).
C. An item of a partition without delay is never held; an item of a delayed partition
   never comes out of :meth:`DelayLine.due` before ``put time + delay``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Generic, TypeVar

T = TypeVar("T")


class DelayLine(Generic[T]):
    """Holds the items of delayed partitions until their time (FIFO per partition)."""

    def __init__(self, delays_s: Mapping[int, float]) -> None:
        bad = {p: d for p, d in delays_s.items() if d < 0}
        if bad:
            raise ValueError(f"delays must not be negative: {bad}")
        self.delays_s = {p: d for p, d in delays_s.items() if d > 0}
        self._held: dict[int, deque[tuple[float, T]]] = {p: deque() for p in self.delays_s}

    def put(self, partition: int | None, item: T, now: float) -> bool:
        """Hold ``item`` if its partition is delayed (True); False: write it now."""
        if partition is None or partition not in self.delays_s:
            return False
        self._held[partition].append((now + self.delays_s[partition], item))
        return True

    def due(self, now: float) -> list[T]:
        """Items whose time has come, taken out (in order within each partition)."""
        out: list[T] = []
        for queue in self._held.values():
            while queue and queue[0][0] <= now:
                out.append(queue.popleft()[1])
        return out

    def next_due(self) -> float | None:
        """When the next held item is due (None: nothing held)."""
        times = [queue[0][0] for queue in self._held.values() if queue]
        return min(times) if times else None

    def drain(self) -> list[T]:
        """Everything still held, taken out regardless of time (per-partition order)."""
        out = [item for queue in self._held.values() for _, item in queue]
        for queue in self._held.values():
            queue.clear()
        return out

    def __len__(self) -> int:
        return sum(len(queue) for queue in self._held.values())
