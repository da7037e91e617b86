"""The CDC part's panels in the benchmark chart (``crossfeed bench --only cdc``):
crossfeed (Debezium → ordered feed → PostgreSQL) beside PostgreSQL's own logical
replication. A side that failed draws nothing; its error goes to the notes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.bench.aggregate import lookup
from crossfeed.bench.chart_bars import Panel, bars, darker, one

SIDES = (
    ("native", "PostgreSQL logical replication", "#777777"),
    ("crossfeed", "crossfeed (JSON)", "#2ca02c"),
    ("crossfeed_avro", "crossfeed (Avro)", "#1f77b4"),
)
# A shade per process within a side's colour, so each bar has its own legend entry.
SHADES = {
    "native": ("#777777", "#bbbbbb"),
    "crossfeed": ("#2ca02c", "#98df8a", "#1a651a", "#c7e9c0"),
    "crossfeed_avro": ("#1f77b4", "#aec7e8", "#0e3d5e", "#c6dbef"),
}


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
        series = [(label, c, [one(lookup(cdc, f"{k}.rows_per_s"))]) for k, label, c in sides]
        capture = one(lookup(cdc, "crossfeed.capture_rows_per_s"))
        if capture is not None:  # what Debezium published per second, beside the apply
            series.append(("Debezium publishing (writer included)", "#98df8a", [capture]))
        bars(ax, ["rows / s applied from a backlog"], series)
        ax.set_title(f"CDC, SQL bank ({cdc.get('transfers', 0):,} transfers): apply rate, one run")

    def lag(ax: Any) -> None:
        series = []
        for key, label, colour in sides:
            for figure in ("p50", "p99"):
                shade = colour if figure == "p50" else darker(colour)
                value = one(lookup(cdc, f"{key}.lag.lag_ms.{figure}"))
                if value is not None:
                    series.append((f"{label} {figure}", shade, [value]))
        bars(ax, ["commit → visible, ms"], series)
        ax.set_title("CDC: commit → visible lag at half load (one run)")

    def rss(ax: Any) -> None:
        series = []
        for key, label, _ in sides:
            found = sorted((cdc[key].get("peak_rss_mb") or {}).items())
            measured_rss = [(p, mb) for p, mb in found if isinstance(mb, (int, float)) and mb > 0]
            for (process, mb), shade in zip(measured_rss, _cycle(SHADES[key]), strict=False):
                series.append((f"{label}: {process}", shade, [one(mb)]))
        bars(ax, ["peak RSS per process tree, MB"], series)
        ax.set_title("CDC: peak RSS (one run)")

    return [rate, lag, rss]


def _cycle(shades: tuple[str, ...]) -> Any:
    while True:
        yield from shades
