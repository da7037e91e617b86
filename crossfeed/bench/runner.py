"""``crossfeed bench`` / ``make bench``: every scenario in one run, on the same two local
clusters; writes ``bench/results/<timestamp>.json`` and a PNG chart next to it."""

from __future__ import annotations

import fcntl
import json
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

from crossfeed import log as logsetup
from crossfeed import paths
from crossfeed.bench import (
    active_active,
    aggregate,
    cdc,
    chart,
    dr,
    facts,
    failover,
    load,
    mirror,
    ordered,
)
from crossfeed.bench import scale as scale_mod
from crossfeed.bench.cleanup import (
    Janitor,
    delete_groups,
    delete_topics,
    stale_groups,
    stale_topics,
)
from crossfeed.bench.failover_sides import (
    CrossfeedSide,
    FailoverSide,
    Mm2Side,
    crossfeed_translation,
)
from crossfeed.bench.measure import broker_labels, broker_pids, create_topics
from crossfeed.bench.perf import payload_file
from crossfeed.bench.systems import Crossfeed, MirrorMaker2, Replicator
from crossfeed.local import postgres, stack
from crossfeed.local.postgres import URI as POSTGRES_URI


@dataclass(frozen=True)
class Plan:
    records: int = 1_000_000
    sizes: tuple[int, ...] = (1024, 100)
    partitions: int = 8
    repeat: int = 3
    lag_fraction: float = 0.5
    lag_seconds: float = 10.0
    throughput: bool = True
    failover: bool = True
    ordered: bool = True
    scale: bool = True
    scale_records: int = 300_000  # per partition count (100 B values)
    scale_partitions: tuple[int, ...] = scale_mod.PARTITION_COUNTS
    discovery_topics: int = scale_mod.DISCOVERY_TOPICS
    # Bank transfers (two changes each) in the ordered backlog: 1,001,000 changes, so both
    # Spark's pass-through and the pipeline run warm for ~20 batches. With 201,000 changes
    # (4 batches of 50,000) Spark's first, JIT-cold batches set its rate (46-53k/s against
    # 105-122k/s here), and the pipeline's first-to-last rate left out one release window
    # of 2-4 (37-68k/s against 50-55k/s).
    ordered_transfers: int = 500_000
    failover_rate: float = 1000.0
    cdc: bool = True
    cdc_transfers: int = 20_000  # SQL bank transfers (3 rows each) in the CDC backlog
    active_active: bool = True
    aa_transfers: int = 20_000  # the backlog that measures Debezium's publishing rate
    aa_lag_seconds: float = 30.0  # each lag phase of the active-active part
    aa_rate: float = 0.0  # transfers/s per direction; 0: half of Debezium's publishing rate
    dr: bool = True  # failover and switchover of a database feed, beside them by hand
    quick: bool = False
    warmup_records: int = 200_000  # per side, copied once before any figure is taken

    @property
    def warmup(self) -> int:
        return min(self.warmup_records, self.records)

    @classmethod
    def quick_plan(cls, repeat: int | None = None) -> Plan:
        return cls(
            records=100_000,
            repeat=repeat or 1,
            lag_seconds=8.0,
            quick=True,
            warmup_records=20_000,
            ordered_transfers=20_000,
            cdc_transfers=3_000,
            aa_transfers=3_000,
            aa_lag_seconds=15.0,
            scale_records=30_000,
            discovery_topics=100,
        )


Say = Callable[[str], None]

WARMUP_LAG_S = 3.0  # the warm-up's steady phase: long enough to run the lag path once


def _say(began: float) -> Say:
    def say(message: str) -> None:
        elapsed = time.monotonic() - began
        print(f"[{int(elapsed // 60):02d}:{int(elapsed % 60):02d}] {message}", file=sys.stderr)

    return say


def _attempt(say: Say, what: str, fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One repetition; a failure is recorded as such (and the run goes on)."""
    began = time.monotonic()
    try:
        result = fn()
    except Exception as err:
        say(f"{what}: FAILED: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
        return {"error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()[-3000:]}
    say(f"{what}: done in {time.monotonic() - began:.0f}s")
    return result


def _throughput(
    plan: Plan,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    run_id: str,
    say: Say,
    into: dict[str, Any],
) -> None:
    """Fills ``into["startup"]`` and ``into["throughput"][size]`` (after every repetition,
    so an interrupted run keeps what it measured)."""
    workdir = janitor.tempdir("load")
    brokers = broker_pids()
    watched = broker_labels(brokers)  # their CPU beside each copy
    startup: dict[str, Any] = into.setdefault("startup", {})
    starters: list[Replicator] = [
        Crossfeed(janitor, f"{run_id}-cf0", a, b),
        Crossfeed(janitor, f"{run_id}-cf0p2", a, b, pullers=2),
        MirrorMaker2(janitor, f"{run_id}-mm0", a, b),
    ]
    for starter in starters:
        calibrate = partial(
            mirror.startup_cost,
            starter,
            a,
            b,
            janitor,
            topic=f"bench-{run_id}-startup-{starter.name}",
            partitions=plan.partitions,
        )
        startup[starter.name] = _attempt(say, f"start-up cost of {starter.name}", calibrate)
    cpu = {name: s.get("cpu_s", {}) for name, s in startup.items()}
    _warm_up(plan, a, b, janitor, run_id, say, workdir, watched, into)
    out: dict[str, Any] = into.setdefault("throughput", {})
    for size in plan.sizes:
        payloads = payload_file(workdir, size)
        common: dict[str, Any] = {
            "records": plan.records,
            "size": size,
            "partitions": plan.partitions,
            "payloads": payloads,
            "workdir": workdir,
        }
        # ceiling, crossfeed, crossfeed-2p, mm2 -> repetitions (each side's own name).
        runs: dict[str, list[Any]] = {"ceiling": []}
        for rep in range(plan.repeat):
            tag = f"{run_id}-{size}b-r{rep}"
            backlog = f"bench-{tag}"
            create_topics(a, [backlog], plan.partitions)
            janitor.topics(a, [backlog])
            say(f"{size} B, repetition {rep + 1}/{plan.repeat}: backlog of {plan.records:,}")
            load.backlog(a, backlog, plan.records, payloads, workdir, janitor)
            ceiling = partial(
                load.ceiling,
                b,
                f"bench-{tag}-ceiling",
                janitor=janitor,
                broker_pid=brokers.get("dc-b"),
                **common,
            )
            runs["ceiling"].append(_attempt(say, f"{size} B r{rep + 1} ceiling", ceiling))
            out[str(size)] = aggregate.throughput_section(runs)
            # One puller, and two (a feed's tasks spread over processes: MM2 runs two
            # tasks on these two cores).
            systems: list[Replicator] = [
                Crossfeed(janitor, f"{tag}-cf", a, b),
                MirrorMaker2(janitor, f"{tag}-mm2", a, b),
                Crossfeed(janitor, f"{tag}-cf2", a, b, pullers=2),
            ]
            # Rotate who reads the backlog first (page cache, warm broker).
            systems = systems[rep % 3 :] + systems[: rep % 3]
            for system in systems:
                measure = partial(
                    mirror.run,
                    system,
                    a,
                    b,
                    janitor,
                    backlog_topic=backlog,
                    brokers=watched,
                    startup_cpu=cpu[system.name],
                    lag_fraction=plan.lag_fraction,
                    lag_seconds=plan.lag_seconds,
                    **common,
                )
                label = f"{size} B r{rep + 1} {system.name}"
                runs.setdefault(system.name, []).append(_attempt(say, label, measure))
                out[str(size)] = aggregate.throughput_section(runs)
            _equal_rate_lag(plan, a, b, janitor, tag, say, systems, runs, common)
            out[str(size)] = aggregate.throughput_section(runs)
            janitor.drop_topics(a, [backlog])


def _equal_rate_lag(
    plan: Plan,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    tag: str,
    say: Say,
    systems: list[Replicator],
    runs: dict[str, list[Any]],
    common: dict[str, Any],
) -> None:
    """Every replicator's lag at one offered rate: half the slower one's throughput in
    this repetition (``lag_equal`` beside each run's ``lag``)."""
    rates = [runs[s.name][-1].get("records_per_s") for s in systems]
    if not rates or any(r is None for r in rates):
        return
    rate = plan.lag_fraction * min(rates)
    for system in systems:
        measure = partial(
            mirror.equal_rate_lag,
            system,
            a,
            b,
            janitor,
            topic=f"bench-{tag}-{system.name}-equal",
            partitions=plan.partitions,
            rate=rate,
            seconds=plan.lag_seconds,
            payloads=common["payloads"],
            workdir=common["workdir"],
        )
        lag = _attempt(say, f"{tag} {system.name} lag at {rate:,.0f} records/s", measure)
        runs[system.name][-1]["lag_equal"] = lag


def _warm_up(
    plan: Plan,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    run_id: str,
    say: Say,
    workdir: Path,
    brokers: dict[str, int],
    into: dict[str, Any],
) -> None:
    """Each side copies a small backlog once, unmeasured. The brokers are shared and were
    maybe just started: their JIT compiles the produce, fetch and transaction paths on
    first use (a cold dc-b spent 2.5 s in its compiler threads during the first copy, and
    up to twice the CPU per record), which would charge whoever happens to go first."""
    size = plan.sizes[0]
    backlog = f"bench-{run_id}-warmup"
    create_topics(a, [backlog], plan.partitions)
    janitor.topics(a, [backlog])
    payloads = payload_file(workdir, size)
    say(f"warm-up: each side copies {plan.warmup:,} records of {size} B (not measured)")
    load.backlog(a, backlog, plan.warmup, payloads, workdir, janitor)
    seconds: dict[str, Any] = {}
    for system in (
        Crossfeed(janitor, f"{run_id}-cfw", a, b),
        MirrorMaker2(janitor, f"{run_id}-mmw", a, b),
    ):
        warm = partial(
            mirror.run,
            system,
            a,
            b,
            janitor,
            backlog_topic=backlog,
            records=plan.warmup,
            size=size,
            partitions=plan.partitions,
            payloads=payloads,
            workdir=workdir,
            brokers=brokers,
            lag_seconds=WARMUP_LAG_S,
        )
        result = _attempt(say, f"warm-up {system.name}", warm)
        seconds[system.name] = result.get("seconds")
    into["warmup"] = {"records": plan.warmup, "size": size, "seconds": seconds}
    janitor.drop_topics(a, [backlog])


def _kill_dc_a() -> None:
    stack.stop("dc-a", hard=True)


def _start_dc_a() -> None:
    stack.start("dc-a")


def _failover(
    plan: Plan,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    run_id: str,
    say: Say,
    into: dict[str, Any],
) -> None:
    translator = crossfeed_translation()[1]
    unavailable = {"crossfeed": translator, "crossfeed-optin": translator, "mm2": None}
    for name, reason in unavailable.items():
        if reason:
            say(f"failover, {name}: not available: {reason}")
    runs: dict[str, list[Any]] = {name: [] for name in unavailable}
    into["failover"] = {
        name: aggregate.failover_section([], reason) for name, reason in unavailable.items()
    }
    for rep in range(plan.repeat):
        tag = f"{run_id}-r{rep}"
        sides: list[FailoverSide] = []
        if not unavailable["crossfeed"]:
            sides.append(CrossfeedSide(Crossfeed(janitor, f"{tag}-cf", a, b)))
            optin = Crossfeed(janitor, f"{tag}-cfo", a, b)
            sides.append(CrossfeedSide(optin, opt_in=True))
        sides.append(Mm2Side(MirrorMaker2(janitor, f"{tag}-mm2", a, b)))
        if rep % 2:
            sides.reverse()
        for side in sides:
            measure = partial(
                failover.run,
                side,
                a,
                b,
                janitor,
                run_id=tag,
                kill_source=_kill_dc_a,
                restart_source=_start_dc_a,
                partitions=plan.partitions,
                rate=plan.failover_rate,
            )
            runs[side.name].append(_attempt(say, f"failover r{rep + 1} {side.name}", measure))
            into["failover"] = {
                name: aggregate.failover_section(runs[name], unavailable[name])
                for name in unavailable
            }


def _scale(
    plan: Plan,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    run_id: str,
    say: Say,
    into: dict[str, Any],
) -> None:
    """``into["scale"]``: per system, the partition counts, then the discovery figure."""
    workdir = janitor.tempdir("scale")
    payloads = payload_file(workdir, 100)
    out: dict[str, Any] = into.setdefault("scale", {"records": plan.scale_records})
    makers: dict[str, Any] = {
        "crossfeed": lambda tag: Crossfeed(janitor, tag, a, b),
        "crossfeed-2p": lambda tag: Crossfeed(janitor, tag, a, b, pullers=2),
        "mm2": lambda tag: MirrorMaker2(janitor, tag, a, b),
    }
    for name, make in makers.items():
        rows = out.setdefault(name, {}).setdefault("partitions", [])
        for count in plan.scale_partitions:
            measure = partial(
                scale_mod.partitions_run,
                make(f"{run_id}-s{count}-{name}"),
                a,
                b,
                janitor,
                partitions=count,
                records=plan.scale_records,
                payloads=payloads,
                workdir=workdir,
            )
            label = f"{count} partitions, {name}"
            rows.append({"partitions": count} | _attempt(say, label, measure))
    discover: dict[str, Any] = {
        "crossfeed": Crossfeed(janitor, f"{run_id}-disc-cf", a, b),
        "mm2": MirrorMaker2(janitor, f"{run_id}-disc-mm2", a, b, refresh_topics_s=None),
    }
    for name, system in discover.items():
        measure = partial(
            scale_mod.discovery_run, system, a, b, janitor, topics=plan.discovery_topics
        )
        out[name]["discovery"] = _attempt(
            say, f"new topic among {plan.discovery_topics:,}, {name}", measure
        )


def _ordered(
    plan: Plan,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    say: Say,
    into: dict[str, Any],
) -> None:
    """``plan.repeat`` repetitions of the ordered feeds, each on its own backlog; the
    section gives their medians (``aggregate.ordered_section``), filled after every
    repetition so an interrupted run keeps what it measured."""
    runs: list[dict[str, Any]] = []
    for rep in range(plan.repeat):
        runs.append(
            _attempt(
                say,
                f"ordered feeds, repetition {rep + 1}/{plan.repeat}",
                partial(
                    ordered.run,
                    janitor,
                    a,
                    b,
                    transfers=plan.ordered_transfers,
                    lag_seconds=max(plan.lag_seconds, 15.0),
                    postgres_uri=POSTGRES_URI,
                    say=say,
                ),
            )
        )
        into["ordered"] = aggregate.ordered_section(runs)


def _cdc(plan: Plan, a: dict[str, Any], b: dict[str, Any], janitor: Janitor, say: Say) -> Any:
    """crossfeed's CDC path beside PostgreSQL's logical replication (one repetition: a
    side's figures come from one backlog; see ``crossfeed/bench/cdc.py``)."""
    return cdc.run(
        janitor,
        a,
        b,
        transfers=plan.cdc_transfers,
        lag_seconds=max(plan.lag_seconds, 20.0),
        say=say,
        attempt=_attempt,
    )


def _active_active(
    plan: Plan, a: dict[str, Any], b: dict[str, Any], janitor: Janitor, say: Say
) -> Any:
    """An active-active pair beside one direction of today's CDC feed (one repetition;
    see ``crossfeed/bench/active_active.py``)."""
    return active_active.run(
        janitor,
        a,
        b,
        transfers=plan.aa_transfers,
        lag_seconds=plan.aa_lag_seconds,
        say=say,
        rate=plan.aa_rate,
    )


def _dr(
    plan: Plan,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    say: Say,
    into: dict[str, Any],
) -> None:
    """A database feed's failover and switchover beside PostgreSQL's logical replication
    by hand (``plan.repeat`` repetitions, ``into["dr"]``; see ``crossfeed/bench/dr.py``)."""
    dr.run(janitor, a, b, repeat=plan.repeat, say=say, attempt=_attempt, into=into)


def _stop_cdc(started: list[str]) -> None:
    """Stop what the benchmark started of the capture side (both sides' for the
    active-active part)."""
    if "connect" in started:
        stack.connect_worker().stop()
    if stack.registry().name in started:
        stack.registry().stop()
    if stack.connect_worker_b().name in started:
        stack.connect_worker_b().stop()
    if postgres.source().name in started:
        postgres.source().stop()


def run(plan: Plan, out_dir: Path | None = None) -> Path:
    began = time.monotonic()
    say = _say(began)
    # Failing connections to a killed dc-a are the failover scenario, not news.
    logsetup.setup("ERROR")
    lock = _lock()
    running = {c.alias for c in stack.CLUSTERS if c.pid()}
    stack.up(postgres=plan.ordered or plan.cdc or plan.active_active or plan.dr)
    started_cdc = stack.up_cdc() if plan.cdc else []
    if plan.active_active or plan.dr:  # both servers captured, with commit timestamps
        started_cdc += stack.up_active_active()
    a = {"bootstrap.servers": stack.node("dc-a").bootstrap}
    b = {"bootstrap.servers": stack.node("dc-b").bootstrap}
    run_id = uuid.uuid4().hex[:6]
    result: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": facts.machine(),
        "versions": facts.versions(),
        "settings": {**asdict(plan), **facts.tuning()},
    }
    try:
        with Janitor() as janitor:
            for conf in (a, b):
                delete_topics(conf, stale_topics(conf))
                delete_groups(conf, stale_groups(conf))
            try:
                if plan.throughput:
                    _throughput(plan, a, b, janitor, run_id, say, result)
                if plan.failover:
                    _failover(plan, a, b, janitor, run_id, say, result)
                if plan.scale:
                    _scale(plan, a, b, janitor, run_id, say, result)
                if plan.ordered:
                    _ordered(plan, a, b, janitor, say, result)
                if plan.cdc:
                    result["cdc"] = _cdc(plan, a, b, janitor, say)
                if plan.active_active:
                    result["active_active"] = _active_active(plan, a, b, janitor, say)
                if plan.dr:
                    _dr(plan, a, b, janitor, say, result)
            except KeyboardInterrupt:
                result["interrupted"] = True
                say("interrupted: cleaning up, writing what was measured")
    finally:
        _stop_cdc(started_cdc)
        for alias in sorted({c.alias for c in stack.CLUSTERS} - running):
            stack.node(alias).stop()  # the benchmark started it: leave the machine as found
        lock.close()
    result.setdefault("ordered", aggregate.not_available("not run (--only)"))
    result.setdefault("cdc", aggregate.not_available("not run (--only)"))
    result.setdefault("active_active", aggregate.not_available("not run (--only)"))
    result.setdefault("dr", aggregate.not_available("not run (--only)"))
    result["machine"]["load_avg_end"] = facts.load_avg()
    result["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["duration_s"] = time.monotonic() - began
    out_dir = out_dir or paths.project_root() / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2, default=str))
    chart.render(result, path.with_suffix(".png"))
    if result.get("interrupted"):
        raise KeyboardInterrupt(str(path))
    return path


def _lock() -> Any:
    """One benchmark at a time per stack: it sweeps what earlier runs left behind."""
    path = paths.home() / "bench.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "w")  # noqa: SIM115 - held for the whole run
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.close()
        raise RuntimeError(f"another benchmark runs on this stack ({path} is locked)") from None
    return handle
