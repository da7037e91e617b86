"""The active-active part's lines in ``crossfeed bench``'s summary (the JSON's
``active_active`` section, crossfeed/bench/active_active.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.bench.aa_figures import DIRECTIONS

PHASES = (("reference", "reference, one direction (today's CDC feed)"), ("active_active", "pair"))


def _num(value: Any, digits: int = 0) -> str:
    return f"{value:,.{digits}f}" if isinstance(value, (int, float)) else "n/a"


def _direction(name: str, phase: Mapping[str, Any]) -> list[str]:
    lag = (phase.get("lag") or {}).get(name)
    if not lag:
        return []
    lag_ms = lag.get("lag_ms") or {}
    cpu = (phase.get("cpu_us_per_change") or {}).get(name) or {}
    rates = (phase.get("conflicts_per_s") or {}).get(name) or {}
    conflicts = (
        f"; conflicts/s {_num(rates.get('handled'), 1)} (lost {_num(rates.get('lost'), 1)}, "
        f"won {_num(rates.get('won'), 1)})"
        if rates
        else ""
    )
    return [
        f"    {name}: lag p50 {_num(lag_ms.get('p50'))} ms, p99 {_num(lag_ms.get('p99'))} ms "
        f"({_num(lag.get('offered_transfers_per_s'), 1)} transfers/s written, "
        f"{_num(lag.get('rows'))} ledger rows, all arrived: {lag.get('all_arrived')}, "
        f"{_num(lag.get('deadlocks_retried'))} retried after a deadlock; median "
        f"of the first quarter {_num(lag.get('p50_first_quarter_ms'))} ms, of the last "
        f"{_num(lag.get('p50_last_quarter_ms'))} ms); CPU per change {_num(cpu.get('total'))} "
        f"µs ({_num(cpu.get('with_connect'))} with Debezium's workers){conflicts}"
    ]


def _phase(label: str, phase: Mapping[str, Any]) -> list[str]:
    processes = (phase.get("cpu_us_per_change") or {}).get("processes") or {}
    per_process = ", ".join(f"{k} {_num(v)}" for k, v in processes.items())
    rss = ", ".join(f"{k} {_num(v)}" for k, v in (phase.get("peak_rss_mb") or {}).items())
    dbs = phase.get("databases") or {}
    out = [f"  {label}: start-up {_num(phase.get('startup_s'), 1)} s"]
    for name in DIRECTIONS:
        out += _direction(name, phase)
    out += [
        f"    CPU µs per change by process: {per_process or 'n/a'}; cores in use "
        f"{_num((phase.get('cores') or {}).get('total'), 2)}",
        f"    peak RSS MB: {rss or 'n/a'}; databases equal: {dbs.get('equal')}, total balance "
        f"kept on both: {dbs.get('totals_kept')}",
    ]
    return out


def lines(section: Mapping[str, Any]) -> list[str]:
    if not section.get("available"):
        return [f"active-active: not available — {section.get('reason', 'not run')}"]
    capture = (section.get("capture") or {}).get("capture_rows_per_s")
    out = [
        f"active-active PostgreSQL pair, SQL bank ({_num(section.get('accounts'))} accounts, "
        f"{section.get('sessions_per_side')} sessions per side): Debezium published "
        f"{_num(capture)} rows/s; each direction at "
        f"{_num(section.get('rate_transfers_per_s'), 1)} transfers/s "
        f"({section.get('rate_asked', 'asked')}) for "
        f"{_num(section.get('lag_seconds'))} s"
    ]
    if "error" in section:
        out.append(f"  FAILED: {str(section['error']).splitlines()[0][:300]}")
    for key, label in PHASES:
        if isinstance(section.get(key), dict):
            out += _phase(label, section[key])
    ratios = section.get("ratios") or {}
    for name in DIRECTIONS:
        row = ratios.get(name) or {}
        if row:
            out.append(
                f"  {name} against the reference: lag p50 {_num(row.get('lag_p50'), 2)}x, p99 "
                f"{_num(row.get('lag_p99'), 2)}x, CPU per change "
                f"{_num(row.get('cpu_per_change'), 2)}x (with Debezium's workers "
                f"{_num(row.get('cpu_per_change_with_connect'), 2)}x): ≤ {ratios.get('goal')}: "
                f"{row.get('met')}"
            )
    if ratios:
        out.append(
            f"  goal (each ratio ≤ {ratios.get('goal')}, both directions): {ratios.get('met')}"
        )
    return out
