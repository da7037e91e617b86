"""Readable summary of a benchmark result file."""

from __future__ import annotations

import json
from pathlib import Path


def summary(path: Path) -> str:
    data = json.loads(path.read_text())
    lines = [f"results: {path}"]
    for name, s in data["scenarios"].items():
        lag = s["lag"]
        lines.append(
            f"{name}: {s['records']:,} x {s['record_bytes']} B over {s['partitions']} partitions: "
            f"{s['records_per_s']:,.0f} records/s, {s['mb_per_s']:.1f} MB/s, "
            f"{s['cpu_s_per_million']:.1f} CPU s per million records; "
            f"lag at {lag['rate_per_s']:,.0f}/s: p50 {lag['p50_ms']:.0f} ms, "
            f"p99 {lag['p99_ms']:.0f} ms, max {lag['max_ms']:.0f} ms"
        )
        for proc, cost in s["processes"].items():
            lines.append(
                f"  {proc}: {cost['cpu_s']:.1f} CPU s, peak RSS {cost['peak_rss_mb']:.0f} MB"
            )
    return "\n".join(lines)
