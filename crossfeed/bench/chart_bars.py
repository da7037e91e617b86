"""What every chart panel draws with (chart.py and the chart_* modules of each part):
grouped bars of spreads, a single figure as a spread, a darker shade for p99."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Panel = Callable[[Any], None]
"""Draws one panel onto the matplotlib axes it is given."""


def bars(ax: Any, groups: list[str], series: list[tuple[str, str, list[Any]]]) -> None:
    """Grouped bars: ``series`` is (label, colour, [spread or None per group])."""
    width = 0.8 / max(1, len(series))
    top = max([s["max"] for _, _, spreads in series for s in spreads if s is not None] or [1.0])
    for i, (label, colour, spreads) in enumerate(series):
        labelled = False
        for g, s in enumerate(spreads):
            x = g + (i - (len(series) - 1) / 2) * width
            if s is None:
                ax.text(x, top * 0.02, "n/a", ha="center", va="bottom", fontsize=8, rotation=90)
                continue
            err = [[s["median"] - s["min"]], [s["max"] - s["median"]]]
            ax.bar(
                x,
                s["median"],
                width,
                color=colour,
                yerr=err,
                capsize=3,
                label=None if labelled else label,
            )
            labelled = True
            ax.text(x, s["max"], short(s["median"]), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(groups)), groups)
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7, loc="best")


def short(v: float) -> str:
    if abs(v) >= 10_000:
        return f"{v / 1000:.0f}k"
    if abs(v) >= 100:
        return f"{v:.0f}"
    return f"{v:.2g}" if abs(v) < 10 else f"{v:.1f}"


def one(value: Any) -> dict[str, float] | None:
    """A single measurement as a spread (min = median = max), or None."""
    if not isinstance(value, (int, float)):
        return None
    return {"min": float(value), "median": float(value), "max": float(value)}


def darker(colour: str) -> str:
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"#{int(r * 0.6):02x}{int(g * 0.6):02x}{int(b * 0.6):02x}"
