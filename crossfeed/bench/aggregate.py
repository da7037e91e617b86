"""Repetitions -> min/median/max, and the ratios between systems (pure, unit-tested).

A failed repetition is kept (``{"error": ...}``) and left out of the figures; a figure
no repetition produced is None ("not available"), never zero.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Spread = dict[str, float]

THROUGHPUT_FIGURES = (
    "records_per_s",
    "mb_per_s",
    "cpu_s_per_million",
    "cpu_s_per_million_with_startup",
    "cpu_s_per_million_window",
    "elapsed_with_startup_s",
    "peak_rss_mb_total",
    "lag.rate_per_s",
    "lag.target_rate_per_s",
    "lag.p50_ms",
    "lag.p99_ms",
    "lag.max_ms",
    "lag_equal.rate_per_s",
    "lag_equal.target_rate_per_s",
    "lag_equal.p50_ms",
    "lag_equal.p99_ms",
    "lag_equal.max_ms",
)
FAILOVER_FIGURES = (
    "ready_s",
    "first_record_s",
    "failover_step_s",
    "re_read",
    "skipped",
)

_TARGET_FIGURES = (
    "startup_s",
    "cpu_us_per_change.total",
    "lag_cores.total",
    "lag_rate_events_per_s",
    "lag_offered_events_per_s",
    "lag_ms.p50",
    "lag_ms.p99",
    "lag_ms.max",
    "lag_steady.lag_offered_events_per_s",
    "lag_steady.lag_cores.total",
    "lag_steady.lag_ms.p50",
    "lag_steady.lag_ms.p99",
)
ORDERED_FIGURES = tuple(
    f"{side}.{figure}"
    for side, figures in (
        ("produce", ("events_per_s",)),
        ("spark_passthrough", ("events_per_s", "startup_s")),
        ("kafka", ("events_per_s", "of_spark_passthrough", "idle_cores.feed", *_TARGET_FIGURES)),
        (
            "postgres",
            (
                "rows_per_s",
                "transactions_per_s",
                "of_ceiling",
                "ceiling.rows_per_s",
                *_TARGET_FIGURES,
            ),
        ),
    )
    for figure in figures
)
"""The ordered section's figures that repetitions give a median of (each ratio is taken
within its own repetition, as the mirror side's are)."""


def spread(values: Iterable[float | int | None]) -> Spread | None:
    """min/median/max of the values that exist; None if none does."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return None
    return {
        "min": min(present),
        "median": statistics.median(present),
        "max": max(present),
        "n": len(present),
    }


def lookup(run: Mapping[str, Any], path: str) -> Any:
    """``lookup(run, "lag.p99_ms")``; None where any step is missing."""
    value: Any = run
    for part in path.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def place(out: dict[str, Any], path: str, value: Any) -> None:
    """``place(d, "lag.p99_ms", v)``: d["lag"]["p99_ms"] = v."""
    *parents, last = path.split(".")
    for part in parents:
        out = out.setdefault(part, {})
    out[last] = value


def ok(runs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in runs if "error" not in r]


def summarize(runs: Sequence[Mapping[str, Any]], figures: Iterable[str]) -> dict[str, Any]:
    """Every figure over the runs, plus the peak RSS and CPU of every process."""
    good = ok(runs)
    out: dict[str, Any] = {}
    for figure in figures:
        place(out, figure, spread(lookup(r, figure) for r in good))
    for group in ("processes", "brokers"):
        labels = sorted({label for r in good for label in r.get(group, {})})
        if labels:
            out[group] = {
                label: {
                    key: spread(lookup(r, f"{group}.{label}.{key}") for r in good)
                    for key in ("cpu_s", "cpu_window_s", "peak_rss_mb")
                }
                for label in labels
            }
    out["repetitions"] = len(runs)
    out["failed"] = [r["error"] for r in runs if "error" in r]
    return out


def ratios(
    numerator: Sequence[Mapping[str, Any]],
    denominator: Sequence[Mapping[str, Any]],
    figure: str = "records_per_s",
) -> Spread | None:
    """Repetition i of one system over repetition i of another (measured side by side)."""
    values = []
    for num, den in zip(numerator, denominator, strict=False):
        a, b = lookup(num, figure), lookup(den, figure)
        if "error" in num or "error" in den or a is None or not b:
            continue
        values.append(a / b)
    return spread(values)


def throughput_section(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """One record size: ``runs`` maps system (crossfeed, crossfeed-2p, mm2, ceiling) ->
    repetitions."""
    out: dict[str, Any] = {name: summarize(rs, THROUGHPUT_FIGURES) for name, rs in runs.items()}
    cf, mm, ceiling = runs.get("crossfeed", []), runs.get("mm2", []), runs.get("ceiling", [])
    cf2 = runs.get("crossfeed-2p", [])
    out["ratios"] = {
        "crossfeed/mm2": ratios(cf, mm),
        "crossfeed/ceiling": ratios(cf, ceiling),
        "mm2/ceiling": ratios(mm, ceiling),
        "cpu crossfeed/mm2": ratios(cf, mm, "cpu_s_per_million"),
    }
    if cf2:
        out["ratios"]["crossfeed-2p/mm2"] = ratios(cf2, mm)
        out["ratios"]["cpu crossfeed-2p/mm2"] = ratios(cf2, mm, "cpu_s_per_million")
    for name, rs in runs.items():
        out[name]["runs"] = list(rs)
    return out


def failover_section(runs: Sequence[Mapping[str, Any]], unavailable: str | None) -> dict[str, Any]:
    if unavailable is not None:
        return {"available": False, "reason": unavailable}
    out = {"available": True, **summarize(runs, FAILOVER_FIGURES)}
    out["runs"] = list(runs)
    return out


def not_available(reason: str) -> dict[str, Any]:
    return {"available": False, "reason": reason}


def ordered_section(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ordered feeds' repetitions as one section that reads like a single run: every
    figure of ``ORDERED_FIGURES`` is the median over the repetitions that produced it
    (``spread`` holds min/median/max), each process's CPU per change its median, its peak
    RSS the highest seen; the repetitions themselves are kept under ``runs``. Not
    available when none succeeded."""
    good = ok(runs)
    if not good:
        first = runs[0].get("error", "no repetition") if runs else "no repetition"
        return {**not_available(str(first).splitlines()[0]), "runs": list(runs)}
    out: dict[str, Any] = copy.deepcopy(dict(good[0]))
    out["spread"] = {}
    for figure in ORDERED_FIGURES:
        figures = spread(lookup(r, figure) for r in good)
        if figures is not None:
            place(out, figure, figures["median"])
            out["spread"][figure] = figures
    for side in ("kafka", "postgres"):
        peaks: dict[str, float] = {}
        for r in good:
            for label, mb in (lookup(r, f"{side}.peak_rss_mb") or {}).items():
                if isinstance(mb, (int, float)):
                    peaks[label] = max(peaks.get(label, 0.0), mb)
        if peaks and isinstance(out.get(side), dict):
            out[side]["peak_rss_mb"] = peaks
        # CPU per change and the cores in use at half load: each process's median too,
        # so they add up like the total's.
        for figure in ("cpu_us_per_change", "lag_cores", "idle_cores"):
            labels = {label for r in good for label in lookup(r, f"{side}.{figure}") or {}}
            for label in sorted(labels):
                figures = spread(lookup(r, f"{side}.{figure}.{label}") for r in good)
                if figures is not None and isinstance(out.get(side), dict):
                    place(out, f"{side}.{figure}.{label}", figures["median"])
    out["repetitions"] = len(runs)
    out["failed"] = [r["error"] for r in runs if "error" in r]
    out["runs"] = list(runs)
    return out
