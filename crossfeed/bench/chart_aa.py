"""The active-active part's panels in the benchmark chart (``crossfeed bench --only
active_active``): each direction of the pair beside the one-direction reference."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.bench.aa_figures import DIRECTIONS
from crossfeed.bench.aggregate import lookup
from crossfeed.bench.chart_bars import Panel, bars, darker, one

BARS = (
    ("reference", "a-to-b", "reference (one direction)", "#777777"),
    ("active_active", "a-to-b", "pair a-to-b", "#2ca02c"),
    ("active_active", "b-to-a", "pair b-to-a", "#1f77b4"),
)


def measured(section: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """The bars with a lag figure."""
    return [bar for bar in BARS if lookup(section, f"{bar[0]}.lag.{bar[1]}.lag_ms.p50") is not None]


def notes(section: Mapping[str, Any]) -> list[str]:
    if not section.get("available"):
        return [f"active-active: not available — {section.get('reason', 'not run')}"]
    out = []
    if "error" in section:
        out.append(f"active-active: failed — {str(section['error']).splitlines()[0]}")
    ratios = section.get("ratios") or {}
    if ratios:
        out.append(
            "active-active against the reference: "
            + "; ".join(
                f"{d} lag p99 {(ratios.get(d) or {}).get('lag_p99')}x, CPU per change "
                f"{(ratios.get(d) or {}).get('cpu_per_change')}x"
                for d in DIRECTIONS
            )
            + f" (goal ≤ {ratios.get('goal')}: {ratios.get('met')})"
        )
    return out


def panels(section: Mapping[str, Any]) -> list[Panel]:
    shown = measured(section) if section.get("available") else []
    if not shown:
        return []

    def lag(ax: Any) -> None:
        series = []
        for phase, direction, label, colour in shown:
            for figure in ("p50", "p99"):
                value = one(lookup(section, f"{phase}.lag.{direction}.lag_ms.{figure}"))
                if value is not None:
                    shade = colour if figure == "p50" else darker(colour)
                    series.append((f"{label} {figure}", shade, [value]))
        bars(ax, ["commit → visible, ms"], series)
        rate = section.get("rate_transfers_per_s")
        ax.set_title(f"active-active: lag at {rate} transfers/s per direction (one run)")

    def cpu(ax: Any) -> None:
        series = []
        for phase, direction, label, colour in shown:
            total = lookup(section, f"{phase}.cpu_us_per_change.{direction}.total")
            debezium = lookup(section, f"{phase}.cpu_us_per_change.{direction}.with_connect")
            series.append((f"{label}: crossfeed", colour, [one(total), one(debezium)]))
        bars(ax, ["crossfeed", "with Debezium's workers"], series)
        ax.set_title("active-active: CPU µs per change (one run)")

    return [lag, cpu]
