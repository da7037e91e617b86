"""What a failover loses, per source partition (the recovery point, in records and seconds).

At failover the source may be down: what is known is the source's end offset as last
seen (``source_end``, learned at ``known_at_ms``), the replicated frontier from the offset
syncs, and — if the source could be read in time — a scan of the records between them.

* ``unreplicated``: copyable records in ``[frontier, source_end)`` — counted by reading
  when a scan covers the range (``counted``), else the offsets between them, an upper
  bound (transaction markers and aborted records take offsets too); -1 if the source end
  was never seen.
* ``rpo_seconds``: the newest source record's timestamp minus the newest replicated
  record's; 0 when nothing is missing; None when either is unknown.
"""

from __future__ import annotations

from dataclasses import dataclass

from crossfeed.translation.books import Frontier
from crossfeed.translation.scan import RangeScan


@dataclass(frozen=True, slots=True)
class PartitionRpo:
    topic: str
    partition: int
    source_end: int | None
    replicated_to: int | None
    """Source offset up to which every copyable record is on the target."""
    target_frontier: int | None
    """Target offset right after the last copy (where failed-over groups at the head resume)."""
    unreplicated: int
    counted: bool
    rpo_seconds: float | None
    known_at_ms: int


def partition_rpo(
    topic: str,
    partition: int,
    *,
    frontier: Frontier | None,
    source_end: int | None,
    scan: RangeScan | None = None,
    newest_source_ts_ms: int = -1,
    last_replicated_ts_ms: int = -1,
    known_at_ms: int = 0,
    floor: int = 0,
) -> PartitionRpo:
    """One partition's loss; ``scan`` must start at the frontier. ``floor``: where the
    feed started copying the partition (everything below counts as replicated)."""
    start = max(frontier.source_next if frontier is not None else 0, floor)
    if scan is not None and scan.start != start:
        raise ValueError(f"scan starts at {scan.start}, not at the frontier {start}")
    if source_end is None:
        unreplicated, counted = -1, False
    elif scan is not None:
        unreplicated, counted = scan.copyable_bound, scan.complete
    else:
        unreplicated, counted = max(0, source_end - start), source_end <= start
    newest = newest_source_ts_ms
    if scan is not None:
        newest = max(newest, scan.newest_copyable_ts_ms)
    seconds: float | None
    if unreplicated == 0:
        seconds = 0.0
    elif newest >= 0 and last_replicated_ts_ms >= 0:
        seconds = max(0.0, (newest - last_replicated_ts_ms) / 1000)
    else:
        seconds = None
    return PartitionRpo(
        topic,
        partition,
        source_end,
        start if frontier is not None or floor > 0 else None,
        frontier.target_next if frontier is not None else None,
        unreplicated,
        counted,
        seconds,
        known_at_ms,
    )
