"""The disaster-recovery part's lines in ``crossfeed bench``'s summary (the JSON's ``dr``
section, crossfeed/bench/dr.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from crossfeed.bench.dr_figures import HEADLINE, SIDE_NAMES, SIDES_OF


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


HEADERS = {
    "failover": "the source server crashed; command → first write committed on the target",
    "switchover": "first refused write on the source → first committed on the target",
}
BESIDE = {  # scenario -> (figure, how it reads) shown when the side has it
    "failover": ("rpo_reported", "RPO reported"),
    "switchover": ("writes_refused_s", "the report's writes_refused_s"),
}


def _scenario(scenario: str, block: Mapping[str, Any]) -> list[str]:
    out = [f"  {scenario} ({HEADERS[scenario]}):"]
    headline = HEADLINE[scenario]
    figure, label = BESIDE[scenario]
    for name in SIDES_OF[scenario]:
        side = block.get(name) or {}
        digits = 0 if figure == "rpo_reported" else 2
        beside = f"; {label} {_spread(side, figure, digits)}" if figure in side else ""
        out.append(
            f"    {SIDE_NAMES[name]}: {_spread(side, headline)} s (the command alone "
            f"{_spread(side, 'command_s')} s{beside}); transfers lost by the application's "
            f"count {_spread(side, 'app_lost', 0)}{_failed(side)}"
        )
    for name in SIDES_OF[scenario][:-1]:
        out.append(f"    {SIDE_NAMES[name]} / by hand: {_spread(block, f'{name}_of_native')}")
    return out


def lines(section: Mapping[str, Any]) -> list[str]:
    if not section.get("available"):
        return [f"disaster recovery: not available — {section.get('reason', 'not run')}"]
    out = [
        f"disaster recovery of a database feed, {section.get('repetitions')} repetition(s), "
        "median [min–max]:"
    ]
    for scenario in SIDES_OF:
        block = section.get(scenario)
        if isinstance(block, Mapping):
            out += _scenario(scenario, block)
    return out
