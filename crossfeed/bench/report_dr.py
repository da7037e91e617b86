"""The disaster-recovery part's lines in ``crossfeed bench``'s summary (the JSON's ``dr``
section, crossfeed/bench/dr.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.bench.dr_figures import SIDE_NAMES, SIDES_OF


def _spread(side: Mapping[str, Any], figure: str, digits: int = 2) -> str:
    found = side.get(figure)
    if not isinstance(found, Mapping):
        return "n/a"
    low, mid, high = (f"{found[k]:,.{digits}f}" for k in ("min", "median", "max"))
    return f"{mid} [{low}–{high}]"


def _failed(side: Mapping[str, Any]) -> str:
    failed = side.get("failed") or 0
    if not failed:
        return ""
    errors = [str(r["error"]).splitlines()[0][:200] for r in side.get("runs", []) if "error" in r]
    return f"; {failed} of {side.get('repetitions')} failed ({errors[0] if errors else '?'})"


def _failover(section: Mapping[str, Any]) -> list[str]:
    out = ["  failover (the source server crashed; command → first write committed on the target):"]
    for name in SIDES_OF["failover"]:
        side = section.get(name) or {}
        rpo = f", RPO reported {_spread(side, 'rpo_reported', 0)}" if "rpo_reported" in side else ""
        out.append(
            f"    {SIDE_NAMES[name]}: {_spread(side, 'writable_s')} s (the command alone "
            f"{_spread(side, 'command_s')} s); transfers lost by the application's count "
            f"{_spread(side, 'app_lost', 0)}{rpo}{_failed(side)}"
        )
    return out


def _switchover(section: Mapping[str, Any]) -> list[str]:
    out = ["  switchover (first refused write on the source → first committed on the target):"]
    for name in SIDES_OF["switchover"]:
        side = section.get(name) or {}
        report = (
            f"; the report's writes_refused_s {_spread(side, 'writes_refused_s')}"
            if "writes_refused_s" in side
            else ""
        )
        out.append(
            f"    {SIDE_NAMES[name]}: {_spread(side, 'unavailable_s')} s (the command "
            f"{_spread(side, 'command_s')} s{report}); transfers lost "
            f"{_spread(side, 'app_lost', 0)}{_failed(side)}"
        )
    return out


def lines(section: Mapping[str, Any]) -> list[str]:
    if not section.get("available"):
        return [f"disaster recovery: not available — {section.get('reason', 'not run')}"]
    out = [
        f"disaster recovery of a database feed, {section.get('repetitions')} repetition(s), "
        "median [min–max]:"
    ]
    for scenario, render in (("failover", _failover), ("switchover", _switchover)):
        block = section.get(scenario)
        if isinstance(block, Mapping):
            out += render(block)
            for name in SIDES_OF[scenario][:-1]:
                ratio = _spread(block, f"{name}_of_native")
                out.append(f"    {SIDE_NAMES[name]} / by hand: {ratio}")
    return out
