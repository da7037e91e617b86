"""The PNG next to each result file: medians as bars, min..max as error bars, and
"n/a" where one system's figure is not available (never a zero-height bar). Only the
parts a run measured get panels; the notes under them say what was not run or not
available."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from crossfeed.bench import chart_aa, chart_cdc, chart_dr
from crossfeed.bench.aggregate import lookup
from crossfeed.bench.chart_bars import Panel, bars, darker, one

SYSTEMS: tuple[tuple[str, str, str], ...] = (
    ("ceiling", "dc-b ceiling", "#999999"),
    ("crossfeed", "crossfeed", "#1f77b4"),
    ("crossfeed-2p", "crossfeed, 2 pullers", "#17becf"),
    ("mm2", "MirrorMaker 2", "#ff7f0e"),
)
# The failover panels compare consumer sides, not replicator set-ups: crossfeed with a
# plain consumer, with the client library's opt-in, and MirrorMaker 2.
FAILOVER_SIDES: tuple[tuple[str, str, str], ...] = (
    ("crossfeed", "crossfeed", "#1f77b4"),
    ("crossfeed-optin", "crossfeed, client library opt-in", "#2ca02c"),
    ("mm2", "MirrorMaker 2", "#ff7f0e"),
)


def render(result: Mapping[str, Any], path: Path) -> Path:
    fig = figure(result)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def figure(result: Mapping[str, Any]) -> Any:
    """One panel per figure that was measured, three to a row: the parts a run left out
    (``--only``) or could not measure get a line in the notes at the bottom, not a panel."""
    replicated = [*_mirror(result.get("throughput", {})), *_failover(result.get("failover", {}))]
    ordered = result.get("ordered", {})
    panels = replicated + (_ordered(ordered) if ordered.get("available") else [])
    panels += chart_cdc.panels(result.get("cdc", {}))
    panels += chart_aa.panels(result.get("active_active", {}))
    panels += chart_dr.panels(result.get("dr", {}))
    rows = max(1, -(-len(panels) // 3))
    fig, axes = plt.subplots(rows, 3, figsize=(17, 1 + 4.3 * rows), squeeze=False)
    cells = [ax for row in axes for ax in row]
    for panel, ax in zip(panels, cells, strict=False):
        panel(ax)
    for ax in cells[len(panels) :]:
        fig.delaxes(ax)
    notes = _notes(result) + chart_cdc.notes(result.get("cdc", {}))
    notes += chart_aa.notes(result.get("active_active", {}))
    notes += chart_dr.notes(result.get("dr", {}))
    if not panels:
        notes.insert(0, "nothing was measured")
    fig.text(0.01, 0.01, "\n".join(textwrap.shorten(n, 190) for n in notes), fontsize=8)

    machine, versions = result.get("machine", {}), result.get("versions", {})
    settings = result.get("settings", {})
    against = (
        f" vs MirrorMaker 2 {versions.get('mirrormaker2')} (Kafka {versions.get('kafka')}): "
        f"{settings.get('records', 0):,} records, {settings.get('partitions')} partitions,"
        if replicated or not panels
        else f" (Kafka {versions.get('kafka')}):"
    )
    repeated = replicated or ordered.get("available")
    fig.suptitle(
        f"crossfeed {versions.get('crossfeed')}{against}"
        + (f" median of {settings.get('repeat')} (bars: min–max);" if repeated else "")
        + f" {machine.get('cpus')} cores, load at start "
        f"{machine.get('load_avg_start')}"
        + (" — BUSY MACHINE, NOISY" if machine.get("busy") else "")
        + (" — QUICK RUN" if settings.get("quick") else ""),
        fontsize=10,
    )
    bottom = min(0.3, 0.05 * 3 / rows)
    fig.tight_layout(rect=(0, bottom, 1, 1 - 0.03 * 3 / rows))
    return fig


def _mirror(tp: Mapping[str, Any]) -> list[Panel]:
    """Mirror throughput, CPU, RSS and lag: four panels, if the throughput part ran."""
    if not tp:
        return []
    sizes = sorted(tp, key=int, reverse=True)
    groups = [f"{int(s):,} B records" for s in sizes]
    replicators = SYSTEMS[1:]

    def series(figure: str, systems: tuple[tuple[str, str, str], ...]) -> list[Any]:
        return [
            (label, colour, [lookup(tp[s], f"{key}.{figure}") for s in sizes])
            for key, label, colour in systems
        ]

    def throughput(ax: Any) -> None:
        bars(ax, groups, series("records_per_s", SYSTEMS))
        ax.set_title("mirror throughput, records/s (dc-a → dc-b)")
        for g, s in enumerate(sizes):
            r = lookup(tp[s], "ratios.crossfeed/mm2.median")
            c = lookup(tp[s], "ratios.crossfeed/ceiling.median")
            note = f"crossfeed/MM2 {r:.2f}" if r else "crossfeed/MM2 n/a"
            note += f"\ncrossfeed/ceiling {c:.2f}" if c else "\ncrossfeed/ceiling n/a"
            ax.annotate(
                note,
                (g, 0),
                xytext=(0, -26),
                textcoords="offset points",
                ha="center",
                va="top",
                fontsize=7,
            )

    def cpu(ax: Any) -> None:
        bars(ax, groups, series("cpu_s_per_million", replicators))
        ax.set_title("CPU seconds per million records copied")

    def rss(ax: Any) -> None:
        bars(ax, groups, series("peak_rss_mb_total", replicators))
        ax.set_title("peak RSS, MB (all the replicator's processes)")

    def lag(ax: Any) -> None:
        lag_series = []
        for key, label, colour in replicators:
            for figure, name in (("p50_ms", "p50"), ("p99_ms", "p99")):
                lag_series.append(
                    (
                        f"{label} {name}",
                        colour if name == "p50" else darker(colour),
                        [lookup(tp[s], f"{key}.lag.{figure}") for s in sizes],
                    )
                )
        bars(ax, groups, lag_series)
        ax.set_title("end-to-end lag at 50% of each one's capacity, ms")

    return [throughput, cpu, rss, lag]


def _failover(fo: Mapping[str, Any]) -> list[Panel]:
    """Failover time and records re-read/skipped: two panels, if any side was measured."""
    if not any(side.get("available") for side in fo.values() if isinstance(side, Mapping)):
        return []

    def measured(key: str, figure: str) -> Any:
        side = fo.get(key, {})
        return side.get(figure) if side.get("available") else None

    def seconds(ax: Any) -> None:
        bars(
            ax,
            ["kill -9 dc-a → group reading on dc-b"],
            [(label, colour, [measured(key, "ready_s")]) for key, label, colour in FAILOVER_SIDES],
        )
        ax.set_title("consumer failover, seconds")

    def records(ax: Any) -> None:
        bars(
            ax,
            ["records re-read", "records skipped"],
            [
                (label, colour, [measured(key, "re_read"), measured(key, "skipped")])
                for key, label, colour in FAILOVER_SIDES
            ],
        )
        ax.set_title("consumer failover, records re-read / skipped")

    return [seconds, records]


def _notes(result: Mapping[str, Any]) -> list[str]:
    """What the chart does not show, and why."""
    notes = []
    if not result.get("throughput"):
        notes.append("mirror throughput and lag: not run")
    fo = result.get("failover")
    for key, label, _ in FAILOVER_SIDES:
        side = (fo or {}).get(key)
        if fo is None:
            notes.append("failover: not run")
            break
        if side is None:
            notes.append(f"failover, {label}: not run")
        elif not side.get("available"):
            notes.append(f"failover, {label}: not available — {side.get('reason')}")
    ordered = result.get("ordered", {})
    if not ordered.get("available"):
        notes.append(f"ordered feeds: not available — {ordered.get('reason', 'not run')}")
    return notes


def _ordered(ordered: Mapping[str, Any]) -> list[Panel]:
    """The ordered feed (bank workload) beside its references: three panels."""
    grey, blue, green = "#999999", "#1f77b4", "#2ca02c"

    def throughput(ax: Any) -> None:
        rate = [
            ("workload produce", grey, lookup(ordered, "produce.events_per_s")),
            ("Spark pass-through", "#bbbbbb", lookup(ordered, "spark_passthrough.events_per_s")),
            ("crossfeed → Kafka", blue, lookup(ordered, "kafka.events_per_s")),
            ("crossfeed → PostgreSQL", green, lookup(ordered, "postgres.rows_per_s")),
            (
                "PostgreSQL upsert ceiling",
                "#777777",
                lookup(ordered, "postgres.ceiling.rows_per_s"),
            ),
        ]
        bars(ax, ["events (row changes) / s"], [(n, c, [one(v)]) for n, c, v in rate])
        ax.set_title("ordered feed, bank workload: throughput")

    def lag(ax: Any) -> None:
        lags = []
        for key, label, colour in (("kafka", "→ Kafka", blue), ("postgres", "→ PostgreSQL", green)):
            for figure in ("p50", "p99"):
                shade = colour if figure == "p50" else darker(colour)
                lags.append(
                    (f"{label} {figure}", shade, [one(lookup(ordered, f"{key}.lag_ms.{figure}"))])
                )
        bars(ax, ["source commit → visible, ms"], lags)
        ax.set_title("ordered feed: lag at half load")

    def rss(ax: Any) -> None:
        per_tree = ordered.get("kafka", {}).get("peak_rss_mb") or {}
        names = sorted(per_tree)
        bars(ax, names, [("→ Kafka", blue, [one(per_tree.get(n)) for n in names])])
        ax.set_title("ordered feed: peak RSS per process tree, MB")

    return [throughput, lag, rss]


def _num(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"
