"""The CDC part's lines in ``crossfeed bench``'s summary (the JSON's ``cdc`` section)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LABELS = {
    "native": "PostgreSQL logical replication",
    "crossfeed": "crossfeed (Debezium, JSON)",
    "crossfeed_avro": "crossfeed (Debezium, Avro)",
}


def _num(value: Any, digits: int = 0) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else "n/a"


def _side(label: str, side: Mapping[str, Any]) -> list[str]:
    if "error" in side:
        return [f"  {label}: failed: {str(side['error']).splitlines()[0][:300]}"]
    lag = side.get("lag") or {}
    lag_ms = lag.get("lag_ms") or {}
    rss = ", ".join(f"{k} {_num(v)}" for k, v in (side.get("peak_rss_mb") or {}).items())
    capture = (
        f"; Debezium published {_num(side.get('capture_rows_per_s'))} rows/s (trailing the "
        f"writer by {_num(side.get('capture_s'), 1)} s)"
    )
    return [
        f"  {label}: {_num(side.get('rows_per_s'))} rows/s "
        f"({_num(side.get('transactions_per_s'))} transactions/s) from the backlog, start-up "
        f"{_num(side.get('startup_s'), 1)} s" + (capture if "capture_s" in side else ""),
        f"    lag at half load ({_num(lag.get('offered_transfers_per_s'))} of "
        f"{_num(lag.get('asked_transfers_per_s'))} transactions/s written, "
        f"{_num(lag.get('rows'))} rows): p50 {_num(lag_ms.get('p50'))} ms, "
        f"p99 {_num(lag_ms.get('p99'))} ms (median of the first quarter "
        f"{_num(lag.get('p50_first_quarter_ms'))} ms, of the last "
        f"{_num(lag.get('p50_last_quarter_ms'))} ms)",
        f"    torn samples {side.get('torn_samples')} of {side.get('samples')}; target equals "
        f"source: {side.get('target_equals_source')}; peak RSS MB: {rss or 'n/a'}",
        f"    CPU {_num(side.get('cpu_ms_per_row'), 3)} ms per row applied; bytes per event: "
        + (
            ", ".join(f"{k} {_num(v)}" for k, v in (side.get("bytes_per_event") or {}).items())
            or "n/a"
        ),
    ]


def lines(cdc: Mapping[str, Any]) -> list[str]:
    if not cdc.get("available"):
        return [f"CDC: not available — {cdc.get('reason', 'not run')}"]
    out = [
        f"CDC, SQL bank ({_num(cdc.get('transfers'))} transfers of 3 rows, "
        f"{cdc.get('sessions')} sessions):"
    ]
    for key, label in LABELS.items():
        if key in cdc or key != "crossfeed_avro":  # a result from before Avro has no such side
            out += _side(label, cdc.get(key) or {})
    goals = cdc.get("goals") or {}
    out.append(
        f"  goals: crossfeed at {_num(goals.get('of_native'), 2)} of native (≥ "
        f"{goals.get('of_native_goal')}: {goals.get('of_native_met')}), lag p99 < "
        f"{_num(goals.get('lag_p99_goal_ms'))} ms: {goals.get('lag_p99_met')}"
    )
    return out
