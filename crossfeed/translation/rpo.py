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

The same for consumer positions, per group partition (:func:`position_rpo`): a group
resumes on the target at the translation of its *last known* commit. That is its last
commit when the source answered at the failover, or when the commit was recorded on the
destination by a ``TimestampedConsumer`` with the opt-in (``timestamps.destination.*``:
each commit is on the target before ``commit()`` returns), or when the source's is past
every commit so recorded (a commit whose answer was lost with the source: latest.py,
rule 4). Otherwise commits made after
the last one known are lost with the source, and the group reads those records again:

* ``reread_max``: an upper bound of the records it may read again — the target offsets
  between where it resumes and the end of the copies (a group cannot re-read what was
  never copied; transaction markers take offsets too). 0 when the position is the last
  commit and the translation exact, and when the group resumes at the replicated
  frontier (it had read everything copied: any later commit lies past the frontier too);
  -1 when unknown. Loose for a group far behind the head: it can only say "not past the
  copies".
* ``commit_age_s``: how old the last known commit was at the failover (None when its
  time is unknown: a listed offset or a checkpoint carries none);
* ``known_until_ms``: the group's commits are known up to this time — when the commit
  log was last read, or the offset last listed (anything committed later is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass

from crossfeed.translation.books import Frontier
from crossfeed.translation.latest import ON_DESTINATION
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


@dataclass(frozen=True, slots=True)
class PositionRpo:
    """What a failover may cost one group on one partition (see the module docstring)."""

    last_commit: bool
    """The position translated is the group's last commit on the source."""
    known_from: str
    """Where it was learnt: listed, commit-log, consumer-timestamps,
    destination-timestamps or checkpoint."""
    known_until_ms: int
    commit_age_s: float | None
    reread_max: int


def position_rpo(
    *,
    source_reachable: bool,
    exact: bool,
    method: str,
    target_offset: int | None,
    target_frontier: int | None,
    known_from: str,
    known_until_ms: int,
    committed_at_ms: int,
    now_ms: int,
    past_recorded: bool = False,
) -> PositionRpo:
    """One group partition's position RPO at a failover at ``now_ms``.

    ``source_reachable``: the source answered in the failover's own round, which listed
    the group's offsets then (so the position is its last commit); a position
    ``known_from`` the destination's recorded commits is the last commit too, and so is one
    ``past_recorded`` (past all of them: latest.py, rule 4).
    ``method``/``exact``:
    the translation's (``rules.Method``); ``target_frontier``: the target offset right
    after the partition's last copy (None without offset syncs); ``committed_at_ms``: when
    the last known commit was made (-1 unknown)."""
    age = max(0.0, (now_ms - committed_at_ms) / 1000) if committed_at_ms >= 0 else None
    last_commit = source_reachable or known_from == ON_DESTINATION or past_recorded
    if target_offset is None:
        reread = -1
    elif method == "frontier" or (last_commit and exact):
        reread = 0
    elif target_frontier is None:
        reread = -1
    else:
        reread = max(0, target_frontier - target_offset)
    return PositionRpo(last_commit, known_from, known_until_ms, age, reread)
