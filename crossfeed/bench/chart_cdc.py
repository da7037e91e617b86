"""The CDC part's panels in the benchmark chart (``crossfeed bench --only cdc``):
crossfeed (Debezium → ordered feed → PostgreSQL) beside PostgreSQL's own logical
replication. A side that failed draws nothing; its error goes to the notes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.bench.aggregate import lookup
from crossfeed.bench.chart import Panel, _bars, _darker, _one

SIDES = (
    ("native", "PostgreSQL logical replication", "#777777"),
    ("crossfeed", "crossfeed", "#2ca02c"),
)


def measured(cdc: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The sides with figures."""
    return [s for s in SIDES if isinstance(cdc.get(s[0]), dict) and "rows_per_s" in cdc[s[0]]]


def notes(cdc: Mapping[str, Any]) -> list[str]:
    if not cdc.get("available"):
        return [f"CDC: not available — {cdc.get('reason', 'not run')}"]
    out = []
    for key, label, _ in SIDES:
        side = cdc.get(key) or {}
        if "error" in side:
            out.append(f"CDC, {label}: failed — {str(side['error']).splitlines()[0]}")
        elif side.get("torn_samples"):
            out.append(f"CDC, {label}: {side['torn_samples']} TORN SAMPLES on the target")
    return out


def panels(cdc: Mapping[str, Any]) -> list[Panel]:
    sides = measured(cdc) if cdc.get("available") else []
    if not sides:
        return []

    def rate(ax: Any) -> None:
        series = [(label, c, [_one(lookup(cdc, f"{k}.rows_per_s"))]) for k, label, c in sides]
        _bars(ax, ["rows / s applied from a backlog"], series)
        ax.set_title(f"CDC, SQL bank ({cdc.get('transfers', 0):,} transfers): apply rate")

    def lag(ax: Any) -> None:
        series = []
        for key, label, colour in sides:
            for figure in ("p50", "p99"):
                shade = colour if figure == "p50" else _darker(colour)
                value = _one(lookup(cdc, f"{key}.lag.lag_ms.{figure}"))
                if value is not None:
                    series.append((f"{label} {figure}", shade, [value]))
        _bars(ax, ["commit → visible, ms"], series)
        ax.set_title("CDC: lag at half load")

    def rss(ax: Any) -> None:
        series = []
        for key, label, colour in sides:
            for process, mb in sorted((cdc[key].get("peak_rss_mb") or {}).items()):
                if isinstance(mb, (int, float)) and mb > 0:
                    series.append((f"{label}: {process}", colour, [_one(mb)]))
        _bars(ax, ["peak RSS per process tree, MB"], series)
        ax.set_title("CDC: peak RSS")

    return [rate, lag, rss]
