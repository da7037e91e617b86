"""``crossfeed bench --only dr``: a database feed's failover and switchover
(docs/disaster-recovery.md) beside the same done by hand with PostgreSQL's own logical
replication, on the ``local up --active-active`` stack (postgres-a captured by Connect-A
into dc-a; the target server, its reverse side captured by Connect-B into dc-b).

Per repetition (``--repeat``; 1 with ``--quick``), each scenario on each side on fresh
databases (``dr_stage.Stage``), the application (``sql_bank.FollowingTransfers``) writing
transfers to the source at a steady ~30-40/s until the target holds 100 of them and 5 s
more:

1. **switchover**: crossfeed's (``dr_crossfeed``) or by hand (``dr_native``); the
   application is told the target as soon as the command returns. Write-unavailability
   as the application sees it: from its first refused write on the source (its session
   ended by the freeze) to its first transfer committed on the target; beside it,
   crossfeed's report's ``writes_refused_s`` and each command's own seconds.
2. **failover**: the source server crashes (``pg_ctl stop -m immediate``) — and for
   ``crossfeed_dc_a_lost`` dc-a's broker is killed too (kill -9), then started again with
   Connect-A afterwards — then the failover (``POST /v1/failover``, or the manual steps)
   is issued at once; the application moves when it returns. Failover time: from the
   command issued to the application's first transfer committed on the target. The RPO
   crossfeed reports (exact from dc-a's Kafka, "at least" without it) beside the
   transfers the application saw commit on the source that the target lacks.

Who goes first alternates between repetitions. The arithmetic is in ``dr_figures``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from functools import partial
from typing import Any

from crossfeed.bench import dr_figures
from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.dr_crossfeed import CrossfeedDr
from crossfeed.bench.dr_figures import Moved
from crossfeed.bench.dr_native import NativeDr
from crossfeed.bench.dr_stage import (
    ACCOUNTS,
    PAUSE_S,
    SOURCE_KAFKA,
    STEADY_S,
    WARM_TRANSFERS,
    Stage,
    lose_source,
    lose_source_kafka,
    restore_source,
    restore_source_kafka,
    source_server,
)

Say = Callable[[str], None]
Attempt = Callable[[Say, str, Callable[[], dict[str, Any]]], dict[str, Any]]
SCENARIOS = ("switchover", "failover")
REVERSE_WAIT_S = 1.0  # the application writes on the new primary before the check


def _moved(stage: Stage, command_at: float, returned_at: float, until: float) -> Moved:
    """After the application's first commit on the target: it is stopped, and what it
    committed is read beside what the target holds."""
    first = stage.first_commit_on_target()
    stage.stop_app()
    app = stage.app
    assert app is not None
    return Moved(
        command_at=command_at,
        returned_at=returned_at,
        refused_at=stage.refused_on_source(),
        first_commit_at=first,
        committed=tuple(app.on("source")),
        held=frozenset(stage.held()),
        written_there=frozenset(app.on("target")),
        writing_s=stage.writing_s(until),
    )


def _checked(run: dict[str, Any], moved: Moved, side: str) -> dict[str, Any]:
    if moved.first_commit_at is None:
        raise RuntimeError(f"{side}: no transfer committed on the new primary within 120 s")
    return run


def switchover_once(side: CrossfeedDr | NativeDr, stage: Stage, say: Say) -> dict[str, Any]:
    try:
        side.setup()
        stage.start_app()
        stage.steady(side.logs)
        say(f"dr switchover {side.name}: the feed runs; switching over")
        command_at = time.monotonic()
        details = side.switchover()
        returned_at = time.monotonic()
        stage.move()
        if isinstance(side, NativeDr) and stage.first_commit_on_target() is not None:
            time.sleep(REVERSE_WAIT_S)
            details["reverse_applies"] = side.reverse_applies()
        moved = _moved(stage, command_at, returned_at, command_at)
        return _checked(dr_figures.switchover_run(moved) | details, moved, side.name)
    finally:
        stage.stop_app()
        side.cleanup()


def failover_once(
    side: CrossfeedDr | NativeDr, stage: Stage, janitor: Janitor, say: Say, kafka_too: bool
) -> dict[str, Any]:
    try:
        side.setup()
        stage.start_app()
        stage.steady(side.logs)
        side.prepare_failover()
        lost = f"the source server crashes{f', {SOURCE_KAFKA} is killed' if kafka_too else ''}"
        say(f"dr failover {side.name}: the feed runs; {lost}")
        lost_at = time.monotonic()
        kill_s = lose_source(janitor)
        if kafka_too:
            kill_s += lose_source_kafka(janitor)
        command_at = time.monotonic()
        details = side.failover()
        returned_at = time.monotonic()
        stage.move()
        moved = _moved(stage, command_at, returned_at, lost_at)
        run = dr_figures.failover_run(moved) | details | {"kill_s": kill_s}
        return _checked(run, moved, side.name)
    finally:
        stage.stop_app()
        if not source_server().running():
            restore_source(janitor)
        if kafka_too:
            restore_source_kafka(janitor)
        side.cleanup()


def run(
    janitor: Janitor,
    a: dict[str, Any],
    b: dict[str, Any],
    *,
    repeat: int,
    say: Say,
    attempt: Attempt,
    into: dict[str, Any],
) -> None:
    """Every scenario on both sides, ``repeat`` times: ``into["dr"]``, the result JSON's
    section (filled after every attempt, so an interrupted run keeps what it measured)."""
    out: dict[str, Any] = into.setdefault("dr", {})
    out |= {
        "available": True,
        "repetitions": repeat,
        "accounts": ACCOUNTS,
        "application": {
            "sessions": 1,
            "pause_s": PAUSE_S,
            "warm_transfers": WARM_TRANSFERS,
            "steady_s": STEADY_S,
        },
        "source_lost_by": "pg_ctl stop -m immediate of the source server (crossfeed_dc_a_lost: "
        "and kill -9 of dc-a's broker)",
    }
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        s: {side: [] for side in dr_figures.SIDES_OF[s]} for s in SCENARIOS
    }
    tag = uuid.uuid4().hex[:6]
    for rep in range(repeat):
        for scenario in SCENARIOS:
            sides = dr_figures.SIDES_OF[scenario]
            for name in sides if rep % 2 == 0 else tuple(reversed(sides)):
                stage = Stage(f"bench_dr_{tag}_{rep}_{scenario[0]}_{sides.index(name)}")
                side: CrossfeedDr | NativeDr = (
                    NativeDr(stage) if name == "native" else CrossfeedDr(janitor, a, b, stage)
                )
                once = (
                    partial(switchover_once, side, stage, say)
                    if scenario == "switchover"
                    else partial(
                        failover_once, side, stage, janitor, say, name == "crossfeed_dc_a_lost"
                    )
                )
                label = f"dr {scenario} r{rep + 1}/{repeat} {name}"
                runs[scenario][name].append(attempt(say, label, once))
                out |= dr_figures.section(runs)
