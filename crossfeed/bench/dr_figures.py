"""The pure arithmetic of the disaster-recovery benchmark (``crossfeed bench --only dr``):
each repetition's times from the application's own clock, the transfers it lost, and the
medians and min/max over the repetitions, crossfeed beside PostgreSQL's logical
replication by hand. No I/O here (unit-tested).

A repetition of a scenario is a dict of figures (seconds, counts) or ``{"error": ...}``.
Times are ``time.monotonic()`` readings of one process, so any two can be subtracted."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crossfeed.bench.aggregate import ok, ratios, spread

SIDES = ("crossfeed", "crossfeed_dc_a_lost", "native")
SIDE_NAMES = {
    "crossfeed": "crossfeed",
    "crossfeed_dc_a_lost": "crossfeed, dc-a's broker killed too",
    "native": "by hand, PostgreSQL logical replication",
}
SIDES_OF = {"failover": SIDES, "switchover": ("crossfeed", "native")}
"""Who takes part in each scenario: a switchover needs dc-a's Kafka."""
FIGURES: dict[str, tuple[str, ...]] = {
    "failover": (
        "writable_s",  # the command issued -> the application's first write committed there
        "command_s",  # the command (or the manual steps) alone
        "app_waited_s",  # the application's first refused write -> its first committed one
        "rpo_reported",  # the failover's count of source transactions lost (crossfeed)
        "app_lost",  # transfers the application saw commit that the new primary lacks
        "transfers_per_s",  # the application's rate before the source was lost
    ),
    "switchover": (
        "unavailable_s",  # first refused write on the source -> first committed on the target
        "command_s",
        "writes_refused_s",  # the switchover report's (crossfeed)
        "app_lost",
        "transfers_per_s",
    ),
}
HEADLINE = {"failover": "writable_s", "switchover": "unavailable_s"}
"""The figure each scenario is compared by."""


def elapsed(start: float | None, end: float | None) -> float | None:
    """Seconds from ``start`` to ``end`` (3 decimals); None if either is unknown or the
    end comes first (the event did not happen after the start)."""
    if start is None or end is None or end < start:
        return None
    return round(end - start, 3)


def lost(committed: Iterable[int], held: Iterable[int], written_there: Iterable[int] = ()) -> int:
    """The transfers the application saw commit on the old primary (their ledger ids) that
    the new primary does not hold. ``written_there``: the ids the application wrote to the
    new primary since — left out of ``held``, since its sequence may hand out again an id
    the old primary used for a transfer that was lost."""
    return len(set(committed) - (set(held) - set(written_there)))


def rate(transfers: int, seconds: float) -> float | None:
    return round(transfers / seconds, 1) if seconds > 0 else None


@dataclass(frozen=True, slots=True)
class Moved:
    """What the application saw across one change of primary, on its own clock:
    ``command_at`` the command (or the first manual step) issued, ``returned_at`` it
    returned (the application is told the new primary then), ``refused_at`` its first
    refused write on the old primary, ``first_commit_at`` its first transfer committed on
    the new one; ``committed`` the ledger ids it saw commit on the old primary over
    ``writing_s`` seconds, ``held`` the ids the new primary has, ``written_there`` those
    the application wrote to it."""

    command_at: float
    returned_at: float
    refused_at: float | None
    first_commit_at: float | None
    committed: tuple[int, ...]
    held: frozenset[int]
    written_there: frozenset[int]
    writing_s: float

    def common(self) -> dict[str, Any]:
        return {
            "command_s": elapsed(self.command_at, self.returned_at),
            "app_lost": lost(self.committed, self.held, self.written_there),
            "app_committed": len(self.committed),
            "transfers_per_s": rate(len(self.committed), self.writing_s),
        }


def failover_run(moved: Moved) -> dict[str, Any]:
    """One failover: from the command to the application's first write committed on the
    new primary, and from its first refused write (the source lost) to that one."""
    return {
        "writable_s": elapsed(moved.command_at, moved.first_commit_at),
        "app_waited_s": elapsed(moved.refused_at, moved.first_commit_at),
    } | moved.common()


def switchover_run(moved: Moved) -> dict[str, Any]:
    """One switchover: how long the application could not write, from its first refused
    write on the source to its first committed one on the target; nothing it saw commit
    may be missing there."""
    return {
        "unavailable_s": elapsed(moved.refused_at, moved.first_commit_at),
        "refused_before_command_s": elapsed(moved.refused_at, moved.command_at),
    } | moved.common()


def steps(began: float, marks: Sequence[tuple[str, float]]) -> dict[str, float]:
    """Each step's seconds, from the mark before it (the first from ``began``) to its own
    (``(label, time)``, in order)."""
    out: dict[str, float] = {}
    last = began
    for label, at in marks:
        out[label] = round(at - last, 3)
        last = at
    return out


def section(runs: Mapping[str, Mapping[str, Sequence[Mapping[str, Any]]]]) -> dict[str, Any]:
    """``runs[scenario][side]``: the repetitions. Per scenario and side every figure's
    ``{min, median, max, n}`` over the repetitions that produced it, the count of failed
    ones and the repetitions themselves; per scenario ``crossfeed_of_native``: the
    headline figure of crossfeed over the one by hand, repetition by repetition (and
    ``crossfeed_dc_a_lost_of_native`` for a failover)."""
    out: dict[str, Any] = {}
    for scenario, figures in FIGURES.items():
        block: dict[str, Any] = {}
        sides = SIDES_OF[scenario]
        for side in sides:
            reps = list((runs.get(scenario) or {}).get(side) or [])
            good = ok(reps)
            figures_of = {f: spread(r.get(f) for r in good) for f in figures}
            block[side] = {
                "repetitions": len(reps),
                "failed": len(reps) - len(good),
                **{f: s for f, s in figures_of.items() if s is not None},
                "runs": reps,
            }
        by_scenario = runs.get(scenario) or {}
        for side in sides[:-1]:
            block[f"{side}_of_native"] = ratios(
                list(by_scenario.get(side) or []),
                list(by_scenario.get("native") or []),
                HEADLINE[scenario],
            )
        out[scenario] = block
    return out
