"""The disaster-recovery part's panels in the benchmark chart (``crossfeed bench --only
dr``): crossfeed's failover and switchover beside the same by hand with PostgreSQL's
logical replication, medians with min–max over the repetitions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.bench.chart_bars import Panel, bars
from crossfeed.bench.dr_figures import SIDE_NAMES, SIDES, SIDES_OF

SWITCHOVER_FIGURES = ["unavailable_s", "command_s", "writes_refused_s"]
COLOURS = {"crossfeed": "#1f77b4", "crossfeed_dc_a_lost": "#17becf", "native": "#777777"}


def _series(
    block: Mapping[str, Any], figures: list[str], sides: tuple[str, ...]
) -> list[tuple[str, str, list[Any]]]:
    return [
        (SIDE_NAMES[side], COLOURS[side], [(block.get(side) or {}).get(f) for f in figures])
        for side in sides
    ]


def notes(section: Mapping[str, Any]) -> list[str]:
    if not section.get("available"):
        return [f"disaster recovery: not available — {section.get('reason', 'not run')}"]
    out = []
    for scenario, sides in SIDES_OF.items():
        for side in sides:
            found = (section.get(scenario) or {}).get(side) or {}
            if found.get("failed"):
                out.append(
                    f"disaster recovery, {scenario} {SIDE_NAMES[side]}: {found['failed']} of "
                    f"{found.get('repetitions')} repetitions failed"
                )
    return out


def panels(section: Mapping[str, Any]) -> list[Panel]:
    if not section.get("available"):
        return []
    failover = section.get("failover") or {}
    switchover = section.get("switchover") or {}
    repetitions = section.get("repetitions")

    def failover_time(ax: Any) -> None:
        bars(
            ax,
            ["command → a write\ncommitted on the target", "the command alone"],
            _series(failover, ["writable_s", "command_s"], SIDES_OF["failover"]),
        )
        ax.set_title(f"database failover, seconds ({repetitions} repetitions)")

    def unavailable(ax: Any) -> None:
        bars(
            ax,
            ["writes refused\n(the application)", "the command", "the report's\nwrites_refused_s"],
            _series(switchover, SWITCHOVER_FIGURES, SIDES_OF["switchover"]),
        )
        ax.set_title(f"database switchover, seconds ({repetitions} repetitions)")

    def lost(ax: Any) -> None:
        bars(
            ax,
            ["failover:\nRPO reported", "failover: lost\n(the application's count)"],
            _series(failover, ["rpo_reported", "app_lost"], SIDES_OF["failover"]),
        )
        ax.set_yscale("symlog", linthresh=10)  # a lagging repetition loses 100 times more
        ax.set_title("failover: source transactions lost")

    if not any(isinstance(b.get(s), Mapping) for b in (failover, switchover) for s in SIDES):
        return []
    return [failover_time, unavailable, lost]
