"""Readable summary of a benchmark result file (medians, [min–max] over repetitions)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from crossfeed.bench import report_aa, report_cdc, report_dr

NAMES = {
    "ceiling": "dc-b ceiling",
    "crossfeed": "crossfeed",
    "crossfeed-2p": "crossfeed (2 pullers)",
    "crossfeed-optin": "crossfeed, client library with the opt-in",
    "mm2": "MirrorMaker 2",
}


def fmt(spread: Mapping[str, float] | None, digits: int = 0, unit: str = "") -> str:
    """``12,345 [12,001–12,900]``; "n/a" when there is no figure."""
    if spread is None:
        return "n/a"
    m, lo, hi = spread["median"], spread["min"], spread["max"]
    if lo == hi:
        return f"{m:,.{digits}f}{unit}"
    return f"{m:,.{digits}f}{unit} [{lo:,.{digits}f}–{hi:,.{digits}f}]"


def _system_lines(name: str, s: Mapping[str, Any]) -> list[str]:
    if not s or s.get("records_per_s") is None:
        errors = "; ".join(e.splitlines()[0] for e in (s or {}).get("failed", [])) or "not run"
        return [f"  {NAMES.get(name, name)}: n/a ({errors})"]
    line = (
        f"  {NAMES.get(name, name)}: {fmt(s['records_per_s'])} records/s, "
        f"{fmt(s['mb_per_s'], 1)} MB/s, {fmt(s['cpu_s_per_million'], 1)} CPU s per million"
    )
    lines = [line]
    lag = s.get("lag") or {}
    if any(v is not None for v in lag.values()):
        achieved, target = lag.get("rate_per_s"), lag.get("target_rate_per_s")
        short = achieved and target and achieved["median"] < 0.9 * target["median"]
        lines.append(
            f"    lag at {fmt(achieved)} records/s"
            + (f" (wanted {fmt(target)}: the load generator fell short)" if short else "")
            + f": p50 {fmt(lag.get('p50_ms'))} ms, p99 {fmt(lag.get('p99_ms'))} ms, "
            f"max {fmt(lag.get('max_ms'))} ms"
        )
    equal = s.get("lag_equal") or {}
    if any(v is not None for v in equal.values()):
        lines.append(
            f"    lag at the rate offered to both ({fmt(equal.get('rate_per_s'))} records/s): "
            f"p50 {fmt(equal.get('p50_ms'))} ms, p99 {fmt(equal.get('p99_ms'))} ms, "
            f"max {fmt(equal.get('max_ms'))} ms"
        )
    procs = s.get("processes", {})
    if procs:
        lines.append(
            "    peak RSS: "
            + ", ".join(f"{p} {fmt(c.get('peak_rss_mb'), unit=' MB')}" for p, c in procs.items())
        )
    if s.get("failed"):
        lines.append(f"    {len(s['failed'])} repetition(s) failed: {s['failed'][0][:200]}")
    return lines


def _failover_lines(name: str, side: Mapping[str, Any]) -> list[str]:
    label = NAMES.get(name, name)
    if not side.get("available"):
        return [f"  {label}: not available — {side.get('reason', 'not run')}"]
    if side.get("ready_s") is None:
        errors = "; ".join(e.splitlines()[0] for e in side.get("failed", [])) or "no figure"
        return [f"  {label}: n/a ({errors})"]
    return [
        f"  {label}: {fmt(side['ready_s'], 1, ' s')} to a group reading every partition "
        f"(first record {fmt(side.get('first_record_s'), 1, ' s')}); re-read "
        f"{fmt(side.get('re_read'))}, skipped {fmt(side.get('skipped'))} records"
    ]


def summary(path: Path) -> str:
    data = json.loads(path.read_text())
    settings, machine, versions = data["settings"], data["machine"], data["versions"]
    lines = [f"results: {path}", f"chart:   {path.with_suffix('.png')}"]
    lines.append(
        f"machine: {machine['cpus']} cores, load {machine.get('load_avg_start')} at start"
        + (" — BUSY: figures are noisy" if machine.get("busy") else "")
        + (" — QUICK RUN: not for comparison" if settings.get("quick") else "")
    )
    lines.append(
        "versions: "
        + ", ".join(f"{k} {v}" for k, v in versions.items() if v is not None)
        + f"; took {data.get('duration_s', 0) / 60:.1f} min"
    )
    if data.get("interrupted"):
        lines.append("INTERRUPTED: partial results")
    for name, start in data.get("startup", {}).items():
        if "error" in start:
            lines.append(f"start-up of {NAMES.get(name, name)}: failed ({start['error'][:200]})")
            continue
        cpu = sum(start.get("cpu_s", {}).values())
        lines.append(
            f"start-up of {NAMES.get(name, name)} with nothing to copy: {start['ready_s']:.0f} s, "
            f"{cpu:.1f} CPU s (left out of CPU per record)"
        )
    for size, section in data.get("throughput", {}).items():
        lines.append(
            f"mirror throughput, {settings['records']:,} x {size} B over "
            f"{settings['partitions']} partitions, median [min–max] of {settings['repeat']}:"
        )
        for name in ("ceiling", "crossfeed", "crossfeed-2p", "mm2"):
            if name in section or name != "crossfeed-2p":
                lines += _system_lines(name, section.get(name, {}))
        r = section.get("ratios", {})
        lines.append(
            f"  crossfeed/MM2 {fmt(r.get('crossfeed/mm2'), 2)}, "
            f"crossfeed/ceiling {fmt(r.get('crossfeed/ceiling'), 2)}, "
            f"MM2/ceiling {fmt(r.get('mm2/ceiling'), 2)}; CPU per record crossfeed/MM2 "
            f"{fmt(r.get('cpu crossfeed/mm2'), 2)}"
        )
        if "crossfeed-2p/mm2" in r:
            lines.append(
                f"  2 pullers: crossfeed/MM2 {fmt(r.get('crossfeed-2p/mm2'), 2)}, CPU per "
                f"record {fmt(r.get('cpu crossfeed-2p/mm2'), 2)}"
            )
    if "failover" in data:
        lines.append("consumer failover (kill -9 dc-a → the group reading on dc-b):")
        for name in ("crossfeed", "crossfeed-optin", "mm2"):
            if name in data["failover"] or name != "crossfeed-optin":
                lines += _failover_lines(name, data["failover"].get(name, {}))
    if "scale" in data:
        lines += _scale_lines(data["scale"])
    ordered = data.get("ordered", {})
    if not ordered.get("available"):
        lines.append(f"ordered feeds: not available — {ordered.get('reason', 'not run')}")
    else:
        lines += _ordered_lines(ordered, machine["cpus"])
    if "cdc" in data:
        lines += report_cdc.lines(data["cdc"])
    if "active_active" in data:
        lines += report_aa.lines(data["active_active"])
    if "dr" in data:
        lines += report_dr.lines(data["dr"])
    return "\n".join(lines)


def _scale_lines(scale: Mapping[str, Any]) -> list[str]:
    lines = [f"how cost grows ({_num(scale.get('records'))} records of 100 B per partition count):"]
    for name in ("crossfeed", "crossfeed-2p", "mm2"):
        side = scale.get(name) or {}
        label = NAMES.get(name, name)
        for row in side.get("partitions", []):
            if "error" in row:
                lines.append(
                    f"  {label}, {row['partitions']:,} partitions: failed: "
                    f"{row['error'].splitlines()[0][:200]}"
                )
                continue
            lines.append(
                f"  {label}, {row['partitions']:,} partitions: {_num(row.get('records_per_s'))} "
                f"records/s, start-up {_num(row.get('startup_s'), 1)} s, peak RSS "
                f"{_num(row.get('peak_rss_mb'))} MB"
            )
        disc = side.get("discovery")
        if not disc:
            continue
        if "error" in disc:
            lines.append(f"  {label}, new topic: failed: {disc['error'].splitlines()[0][:200]}")
        elif disc.get("new_topic_s") is None:
            lines.append(
                f"  {label}, a new topic among {_num(disc.get('topics'))}: its first record not "
                f"on dc-b within {_num(disc.get('waited_s'))} s (all mirrored in "
                f"{_num(disc.get('all_mirrored_s'), 1)} s)"
            )
        else:
            lines.append(
                f"  {label}, a new topic among {_num(disc.get('topics'))}: its first record on "
                f"dc-b after {_num(disc.get('new_topic_s'), 1)} s (all mirrored in "
                f"{_num(disc.get('all_mirrored_s'), 1)} s)"
            )
    return lines


def _ordered_lines(o: dict[str, Any], cpus: int) -> list[str]:
    produce, spark = o.get("produce", {}), o.get("spark_passthrough", {})
    lines = [
        f"ordered feed, bank workload ({produce.get('events', 0):,} changes): workload produce "
        f"{_num(produce.get('events_per_s'))} events/s, Spark pass-through "
        f"{_num(spark.get('events_per_s'))} events/s"
    ]
    for key, what in (("kafka", "events_per_s"), ("postgres", "rows_per_s")):
        side = o.get(key)
        if not isinstance(side, dict):
            continue
        lag = side.get("lag_ms", {})
        extra = (
            f", {_num(side.get('of_spark_passthrough'), 2)} of Spark"
            if key == "kafka"
            else f" ({_num(side.get('transactions_per_s'))} transactions/s), "
            f"{_num(side.get('of_ceiling'), 2)} of the upsert ceiling "
            f"({_num(side.get('ceiling', {}).get('rows_per_s'))} rows/s)"
        )
        lines.append(
            f"  into {key}: {_num(side.get(what))} {what.split('_')[0]}/s{extra}; lag at half "
            f"load ({_num(side.get('lag_rate_events_per_s'))}/s asked, "
            f"{_num(side.get('lag_offered_events_per_s'))}/s written) "
            f"p50 {_num(lag.get('p50'))} ms, p99 {_num(lag.get('p99'))} ms; start-up "
            f"{_num(side.get('startup_s'), 1)} s; peak RSS MB {side.get('peak_rss_mb')}"
        )
        steady = side.get("lag_steady")
        if isinstance(steady, dict):
            lines.append(
                f"    lag at a steady {_num(steady.get('lag_rate_events_per_s'))}/s "
                f"({_num(steady.get('lag_offered_events_per_s'))}/s written): p50 "
                f"{_num(steady.get('lag_ms', {}).get('p50'))} ms, p99 "
                f"{_num(steady.get('lag_ms', {}).get('p99'))} ms; cores in use "
                f"{_num(steady.get('lag_cores', {}).get('total'), 2)} of {cpus}"
            )
        for figure, total, digits, text in (
            ("cpu_us_per_change", "total", 1, "CPU per change: {} µs"),
            ("lag_cores", "total", 2, f"cores in use at half load: {{}} of {cpus}"),
            ("idle_cores", "feed", 3, "cores while the source is quiet: {}"),
        ):
            line = _per_process(side.get(figure), total, digits, text)
            if line:
                lines.append(line)
        if o.get("repetitions", 1) > 1:
            lines.append(
                f"    medians of {o['repetitions']} repetitions ({len(o.get('failed', []))} "
                f"failed): {what.split('_')[0]}/s {_range(o, f'{key}.{what}')}, lag p99 "
                f"{_range(o, f'{key}.lag_ms.p99')} ms, CPU per change "
                f"{_range(o, f'{key}.cpu_us_per_change.total', 1)} µs, cores at half load "
                f"{_range(o, f'{key}.lag_cores.total', 2)}"
            )
    return lines


def _per_process(figures: Any, total: str, digits: int, text: str) -> str | None:
    """``text`` with the ``total`` figure, then each process's in brackets (None: not
    measured)."""
    if not isinstance(figures, dict):
        return None
    each = ", ".join(f"{label} {_num(n, digits)}" for label, n in figures.items() if label != total)
    return "    " + text.format(_num(figures.get(total), digits)) + f" ({each})"


def _range(o: dict[str, Any], figure: str, digits: int = 0) -> str:
    """A repeated ordered figure's [min–max]."""
    found = o.get("spread", {}).get(figure)
    if not found:
        return "n/a"
    return f"[{_num(found['min'], digits)}–{_num(found['max'], digits)}]"


def _num(value: Any, digits: int = 0) -> str:
    """One measured figure (not a spread); "n/a" when absent."""
    if not isinstance(value, (int, float)):
        return "n/a"
    return f"{value:,.{digits}f}"
