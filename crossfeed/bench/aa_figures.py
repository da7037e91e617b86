"""The pure arithmetic of the active-active benchmark (``crossfeed bench --only
active_active``): CPU per change of each process and per direction, conflicts per second,
and active-active's cost against the one-direction reference. No I/O here (unit-tested).

Process labels: a direction's own processes start with it (``a-to-b puller``,
``b-to-a sink``); every other label (``dc-a broker``, ``postgres-a``, ...) is shared by
both directions and its CPU is divided by the changes of both. ``connect`` labels (the
Debezium workers) are reported beside: their CPU is Debezium's, not crossfeed's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

DIRECTIONS = ("a-to-b", "b-to-a")
GOAL_RATIO = 1.2  # active-active at most 20% more lag or CPU per change, each direction
BESIDE = "connect"
OUTCOMES = ("lost", "won")  # crossfeed_sink_conflicts_total's


def direction_of(label: str) -> str | None:
    """The direction a process label belongs to (None: shared)."""
    head = label.split(" ", 1)[0]
    return head if head in DIRECTIONS else None


def cpu_per_change(cpu_s: Mapping[str, float], changes: Mapping[str, int]) -> dict[str, Any]:
    """µs of CPU per change: each process's (a direction's own over that direction's
    changes, a shared one over all), and per direction ``total`` (its own processes plus
    the shared ones but the Connect workers) and ``with_connect``."""
    every = sum(changes.values())
    out: dict[str, Any] = {"processes": {}}
    shared = beside = 0.0
    for label, seconds in cpu_s.items():
        direction = direction_of(label)
        count = changes.get(direction, 0) if direction else every
        out["processes"][label] = round(seconds / count * 1e6, 1) if count else None
        if direction is None:
            if label.startswith(BESIDE):
                beside += seconds
            else:
                shared += seconds
    for direction, count in changes.items():
        if not count:
            continue
        own = sum(s for label, s in cpu_s.items() if direction_of(label) == direction)
        total = own / count + shared / every
        out[direction] = {
            "own": round(own / count * 1e6, 1),
            "shared": round(shared / every * 1e6, 1),
            "total": round(total * 1e6, 1),
            "with_connect": round((total + beside / every) * 1e6, 1),
        }
    return out


_SAMPLE = re.compile(r"^crossfeed_sink_conflicts_total\{([^}]*)\}\s+(\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def conflicts_of(metrics: str, feed: str) -> dict[str, float]:
    """``crossfeed_sink_conflicts_total`` of ``feed`` by outcome, from a /metrics page."""
    out: dict[str, float] = {}
    for line in metrics.splitlines():
        found = _SAMPLE.match(line.strip())
        if not found:
            continue
        labels = dict(_LABEL.findall(found.group(1)))
        if labels.get("feed") == feed and "outcome" in labels:
            out[labels["outcome"]] = out.get(labels["outcome"], 0.0) + float(found.group(2))
    return out


def conflict_rates(
    before: Mapping[str, float], after: Mapping[str, float], seconds: float
) -> dict[str, float]:
    """Conflicts per second in a phase, by key (the sink's outcomes ``lost`` and ``won``,
    and whatever else was counted, e.g. the ``recorded`` rows of ``crossfeed_conflicts``),
    and the sink's outcomes together (``handled``)."""
    seconds = max(seconds, 1e-3)
    out = {
        key: round((after.get(key, 0.0) - before.get(key, 0.0)) / seconds, 2)
        for key in sorted(set(before) | set(after))
    }
    out["handled"] = round(sum(v for k, v in out.items() if k in OUTCOMES), 2)
    return out


def _ratio(ours: Any, theirs: Any) -> float | None:
    if isinstance(ours, (int, float)) and isinstance(theirs, (int, float)) and theirs > 0:
        return round(ours / theirs, 3)
    return None


def ratios(reference: Mapping[str, Any], active: Mapping[str, Any]) -> dict[str, Any]:
    """Each active-active direction against the reference's one direction: lag p50 and
    p99, CPU per change (crossfeed's total, and with Debezium's workers); ``met``: every
    ratio at most :data:`GOAL_RATIO` (None when a figure is missing)."""
    ref_lag = ((reference.get("lag") or {}).get("a-to-b") or {}).get("lag_ms") or {}
    ref_cpu = (reference.get("cpu_us_per_change") or {}).get("a-to-b") or {}
    out: dict[str, Any] = {"goal": GOAL_RATIO}
    verdicts: list[bool | None] = []
    for direction in DIRECTIONS:
        lag = ((active.get("lag") or {}).get(direction) or {}).get("lag_ms") or {}
        cpu = (active.get("cpu_us_per_change") or {}).get(direction) or {}
        row: dict[str, Any] = {
            "lag_p50": _ratio(lag.get("p50"), ref_lag.get("p50")),
            "lag_p99": _ratio(lag.get("p99"), ref_lag.get("p99")),
            "cpu_per_change": _ratio(cpu.get("total"), ref_cpu.get("total")),
            "cpu_per_change_with_connect": _ratio(
                cpu.get("with_connect"), ref_cpu.get("with_connect")
            ),
        }
        judged = [r for r in (row["lag_p50"], row["lag_p99"], row["cpu_per_change"]) if r]
        row["met"] = all(r <= GOAL_RATIO for r in judged) if len(judged) == 3 else None
        verdicts.append(row["met"])
        out[direction] = row
    out["met"] = None if None in verdicts else all(verdicts)
    return out
