"""Ordered feeds in ``make bench``: the bank workload through pullers, the Spark sorter and
a sink, into Kafka and into PostgreSQL, beside the references measured in the same run.

Per target, on one backlog of bank transfers written to dc-a beforehand:

* **events/s** from the first change visible on the target to the last (and the start-up:
  launch to the first change), with every process's peak RSS (the sorter's Spark JVM and
  Python workers counted with it);
* **CPU per change**, per process and in total: the pipeline's processes (the sorter with
  its JVM), both brokers and, into PostgreSQL, the database server with its backends —
  everything a change costs on the machine (the sorter and the sink from the first change
  on the target, leaving their start-up out; the others from the pipeline's start, since
  the pullers copy the backlog before that);
* **idle cores** (into Kafka): the feed's processes and the brokers over 30 s of a quiet
  source after the lag phase (crossfeed/bench/feed_idle.py);
* **lag at half load**: the workload at half that rate for ``lag_seconds``, source
  commit_ts → visible on the target, p50/p99. The workload encodes the phase's transfers
  before its clock starts (``build_ahead``), so while the pipeline is measured it costs
  only its produce calls: on two shared cores, building each transfer as it is written
  took ~0.45 of a core at 20k changes/s away from the pipeline it measures (the mirror
  benchmark's writer likewise sends prepared values). Beside it, the **cores in use**
  meanwhile (``lag_cores``: each process, this one's writer and watch, and their total,
  read against the result's ``machine.cpus``): half of the backlog's rate is not half of
  what the pipeline can do at a steady rate, where every micro-batch and transaction is
  small and the workload and its broker share the machine.

References: the workload's own produce rate (how fast changes can be written at all),
Spark's Kafka-to-Kafka pass-through of the same backlog (``spark_passthrough``: the most a
Spark job moves through these brokers), and for PostgreSQL the database's own ceiling:
the same rows written by a batched upsert loop with no crossfeed in between.
"""

from __future__ import annotations

import contextlib
import resource
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from crossfeed.bench import jvm
from crossfeed.bench.cleanup import Janitor, delete_groups
from crossfeed.bench.measure import (
    SETTLE_S,
    PeakRss,
    ProcessCost,
    TargetWatch,
    broker_labels,
    broker_pids,
    idle_cores,
    percentiles,
    rounded,
)
from crossfeed.bench.systems import bench_config, service_command
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.local import processes
from crossfeed.local.postgres import Postgres
from crossfeed.wire import ids
from crossfeed.wire import topics as wire_topics
from crossfeed.workload.bank import Summary
from crossfeed.workload.run import run_bank

PARTITIONS = 8
ACCOUNTS = 1000
ROLES = ("puller-1", "puller-2", "sorter", "sink")


class Pipeline:
    """Two pullers, a sorter and a sink on a feed file, as an operator runs them (or the
    processes ``roles`` names, ``options`` the feed's). ``source``: the cluster it reads
    (``a`` and ``b`` stay dc-a's and dc-b's settings; the feed's own topics go to the other
    one), ``feed`` its name, ``args`` extra command-line arguments per role label."""

    def __init__(
        self,
        janitor: Janitor,
        a: dict[str, Any],
        b: dict[str, Any],
        topic: str | list[str],
        sink_uri: str,
        roles: tuple[str, ...] = ROLES,
        options: dict[str, Any] | None = None,
        *,
        source: str = "dc-a",
        feed: str | None = None,
        args: dict[str, list[str]] | None = None,
    ) -> None:
        self.janitor, self.a, self.b, self.roles = janitor, a, b, roles
        self.feed = feed or f"bench-ordered-{uuid.uuid4().hex[:6]}"
        self.args = args or {}
        self.workdir = janitor.tempdir(self.feed)
        self.config = bench_config(self.workdir, {"dc-a": a, "dc-b": b})
        self.feed_file = self.workdir / "feed.yaml"
        spec = {
            "name": self.feed,
            "source": source,
            "sink-uri": sink_uri,
            "mode": "ordered",
            "topics": [topic] if isinstance(topic, str) else list(topic),
            "start": "earliest",
            "config": options or {"staging.partitions": 4},
        }
        self.feed_file.write_text(yaml.safe_dump(spec))
        self.procs: dict[str, Any] = {}
        here, there = (b, a) if source == "dc-b" else (a, b)
        self.target = there  # where the feed's own topics and groups are
        janitor.topics(there, [wire_topics.changes(self.feed), wire_topics.sorted_(self.feed)])
        if (options or {}).get("input") == "debezium":
            janitor.topics(here, [wire_topics.debezium_ordered(self.feed)])
            janitor.topics(there, [wire_topics.schemas(self.feed)])

    def start(self) -> dict[str, int]:
        for label in self.roles:
            role = label.split("-")[0]
            cmd = service_command(
                self.config,
                role,
                self.feed,
                self.feed_file,
                "--instance",
                f"{self.feed}-{label}",
                *self.args.get(label, []),
            )
            log = self.workdir / f"{label}.log"
            self.procs[label] = self.janitor.process(jvm.spawn(cmd, log))
        return {label: p.pid for label, p in self.procs.items()}

    def stop(self) -> None:
        for proc in self.procs.values():
            self.janitor.stop(proc)
        self.procs.clear()
        groups = [ids.puller_group(self.feed), ids.sink_group(self.feed)]
        delete_groups(self.target, groups)

    def logs(self) -> str:
        return str(self.workdir)

    def check_running(self) -> None:
        """RuntimeError when one of the processes has exited: what it waits for will then
        never come, and the error names the log to read."""
        gone = [
            f"{label} (exit {p.poll()})" for label, p in self.procs.items() if p.poll() is not None
        ]
        if gone:
            raise RuntimeError(f"{', '.join(gone)} stopped; logs in {self.logs()}")


def write_backlog(a: dict[str, Any], topic: str, transfers: int) -> dict[str, Any]:
    """The backlog, and the workload's produce rate (the first reference)."""
    summary, _bank = run_bank(
        a, topic, accounts=ACCOUNTS, partitions=PARTITIONS, transactions=transfers
    )
    return {
        "transactions": summary.transactions,
        "events": summary.events,
        "seconds": round(summary.seconds, 2),
        "events_per_s": round(summary.events / summary.seconds, 1),
        "last_commit_ts": summary.last_commit_ts,
    }


def spark_passthrough(
    janitor: Janitor, a: dict[str, Any], b: dict[str, Any], topic: str, events: int
) -> dict[str, Any]:
    """Spark's Kafka-to-Kafka pass-through of the backlog (the sorter's ceiling)."""
    out = f"bench-spark-out-{uuid.uuid4().hex[:6]}"
    janitor.topics(b, [out])
    kafka_topics.ensure_topic(clients.admin(b), out, 1)  # like the sorted topic: one partition
    workdir = janitor.tempdir("spark-passthrough")
    watch = TargetWatch(b, out, 1).start()
    cmd = [
        sys.executable,
        "-m",
        "crossfeed.bench.spark_passthrough",
        a["bootstrap.servers"],
        topic,
        b["bootstrap.servers"],
        out,
        str(workdir / "checkpoint"),
    ]
    began = time.monotonic()
    proc = janitor.process(jvm.spawn(cmd, workdir / "spark.log"))
    rss = PeakRss({"spark": proc.pid})
    rss.start()
    try:
        deadline = time.monotonic() + 900
        done = False
        while not done and proc.poll() is None and time.monotonic() < deadline:
            done = watch.wait_for(events, timeout_s=5, idle_s=120)
    finally:
        janitor.stop(proc)
        watch.stop()
    peak = rss.finish()
    if not done or watch.first_at is None or watch.last_at is None:
        raise RuntimeError(
            f"Spark pass-through moved {watch.count} of {events}; its log ends:\n"
            + processes.tail(workdir / "spark.log", 40)
        )
    return {
        "events_per_s": round(events / max(watch.last_at - watch.first_at, 1e-3), 1),
        "startup_s": round(watch.first_at - began, 1),
        "peak_rss_mb": peak["spark"],
    }


def kafka_target(
    janitor: Janitor,
    a: dict[str, Any],
    b: dict[str, Any],
    topic: str,
    backlog: dict[str, Any],
    lag_seconds: float,
) -> dict[str, Any]:
    """The backlog into an ordered Kafka topic, then the lag at half that rate."""
    target = f"bench-ledger-{uuid.uuid4().hex[:6]}"
    janitor.topics(b, [target])
    pipeline = Pipeline(janitor, a, b, topic, f"kafka://dc-b/{target}")
    watch = TargetWatch(b, target, 1).start()
    began = time.monotonic()
    pids = pipeline.start()
    rss = PeakRss(pids)
    rss.start()
    cost = cost_meter(pids)
    try:
        events = int(backlog["events"])
        if not _wait_target(watch, events, pipeline, timeout_s=1200, idle_s=180):
            raise RuntimeError(
                f"{watch.count} of {events} changes arrived; logs in {pipeline.logs()}"
            )
        assert watch.first_at is not None and watch.last_at is not None
        result: dict[str, Any] = {
            "events": events,
            "events_per_s": round(events / max(watch.last_at - watch.first_at, 1e-3), 1),
            "startup_s": round(watch.first_at - began, 1),
            "cpu_us_per_change": cpu_per_change(cost, (watch.first_at, watch.last_at), events),
        }
        # Half load: transfers carry two changes each.
        rate = max(result["events_per_s"] / 2 / 2, 1.0)
        watch.lag_since_ms = time.time() * 1000
        watch.record_lag = True
        summary, result["lag_cores"] = lag_phase(pids, transfers_at(a, topic, rate, lag_seconds))
        expected = events + summary.events
        _wait_target(watch, expected, pipeline, timeout_s=300, idle_s=60)
        lags = percentiles(watch.lags_ms)
        result["lag_ms"] = rounded(lags)
        result["lag_rate_events_per_s"] = round(rate * 2, 1)
        result["lag_offered_events_per_s"] = offered(summary)
        result["lag_phase_events"] = summary.events
        result["lag_phase_last_commit_ts"] = summary.last_commit_ts
        # Then the steady rate, the same on every machine.
        watch.lags_ms, watch.lag_since_ms = [], time.time() * 1000
        steady, cores = lag_phase(
            pids, transfers_at(a, topic, STEADY_EVENTS_PER_S / 2, lag_seconds)
        )
        _wait_target(watch, expected + steady.events, pipeline, timeout_s=300, idle_s=60)
        result["lag_steady"] = steady_figures(steady, cores, rounded(percentiles(watch.lags_ms)))
        result["peak_rss_mb"] = rss.finish()
        # Then the source goes quiet: what the feed costs while nothing happens.
        time.sleep(SETTLE_S)
        result["idle_cores"] = idle_cores(pids, IDLE_SECONDS)
        return result
    finally:
        rss.stopping.set()
        cost.stop()
        watch.stop()
        pipeline.stop()


IDLE_SECONDS = 30.0
"""How long the Kafka target's feed is measured quiet, after its lag phase."""

STEADY_EVENTS_PER_S = 8_000.0
"""The second lag phase's rate, changes/s: the same on every machine (the first, half the
backlog rate, follows the machine)."""


def steady_figures(
    summary: Summary, cores: dict[str, float], lag: dict[str, float | None]
) -> dict[str, Any]:
    """The steady-rate phase's rate written, the cores in use meanwhile, and its lag."""
    return {
        "lag_ms": lag,
        "lag_cores": cores,
        "lag_rate_events_per_s": STEADY_EVENTS_PER_S,
        "lag_offered_events_per_s": offered(summary),
    }


def cost_meter(pids: dict[str, int], database: bool = False) -> ProcessCost:
    """CPU of the pipeline's processes, both brokers and (``database``) the target
    PostgreSQL server, each with its children, from now on."""
    others = broker_labels(broker_pids())
    database_pid = Postgres().pid() if database else None
    if database_pid:
        others["postgresql"] = database_pid
    return ProcessCost({**pids, **others}, tree=True)


# Started with a JVM and a Spark session (tens of CPU seconds): their CPU counts from the
# first change on the target. Everything else counts from the pipeline's start: the
# pullers copy the backlog into `.changes` before the sorter's first batch, and the
# brokers serve that copy (their idle CPU meanwhile is counted too: a little too much).
_FROM_FIRST_CHANGE = ("sorter", "sink")


def cpu_per_change(
    cost: ProcessCost, window: tuple[float, float], changes: int
) -> dict[str, float]:
    """µs of CPU per change of each process, and their total: the sorter and the sink in
    ``window`` (first to last change on the target, monotonic), the others from the start
    of ``cost`` to its end."""
    spent = cost.finish(window)
    used = {
        label: c["cpu_window_s"] if label in _FROM_FIRST_CHANGE else c["cpu_to_last_s"]
        for label, c in spent.items()
    }
    out = {label: round(s / changes * 1e6, 1) for label, s in used.items()}
    out["total"] = round(sum(used.values()) / changes * 1e6, 1)
    return out


# This process writes the lag phase's workload and watches the target: its CPU is on the
# same cores as the pipeline's.
BENCH = "bench (writer, watch)"


def transfers_at(
    a: dict[str, Any], topic: str, rate: float, seconds: float
) -> Callable[[], Summary]:
    """A lag phase's workload: bank transfers at ``rate`` a second for ``seconds``,
    built before the clock starts."""
    return lambda: run_bank(
        a, topic, accounts=ACCOUNTS, partitions=PARTITIONS, rate=rate, seconds=seconds,
        build_ahead=True,
    )[0]  # fmt: skip


def lag_phase(
    pids: dict[str, int], write: Callable[[], Summary], database: bool = False
) -> tuple[Summary, dict[str, float]]:
    """``write`` (the lag phase's workload) and the cores each process used while it
    wrote: the pipeline's, both brokers', the database's (``database``) and this
    process's own, and their total. A total near the machine's cores means the "half
    load" is not half of what the pipeline can do while it shares the machine with its
    workload: the lag then measures a queue that grows."""
    cost = cost_meter(pids, database)
    own, began = _own_cpu_s(), time.monotonic()
    try:
        summary = write()
    except BaseException:
        cost.stop()
        raise
    ended, own = time.monotonic(), _own_cpu_s() - own
    seconds = max(ended - began, 1e-3)
    used = {label: c["cpu_window_s"] for label, c in cost.finish((began, ended)).items()}
    used[BENCH] = own
    cores = {label: round(s / seconds, 2) for label, s in used.items()}
    cores["total"] = round(sum(used.values()) / seconds, 2)
    return summary, cores


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def offered(summary: Summary) -> float:
    """The rate the workload really wrote in the lag phase (events/s): on 2 shared cores it
    can fall short of the rate asked for, and the lag is only meaningful beside it."""
    return round(summary.events / max(summary.seconds, 1e-3), 1)


def postgres_target(
    janitor: Janitor,
    a: dict[str, Any],
    b: dict[str, Any],
    topic: str,
    events: int,
    transactions: int,
    last_commit_ts: int,
    postgres_uri: str,
    lag_seconds: float,
) -> dict[str, Any]:
    """Everything on ``topic`` so far (``events`` changes in ``transactions``, the newest
    at ``last_commit_ts``) into PostgreSQL, the lag at half that rate, and the database's
    own batched-upsert ceiling.

    Progress is the sink's applied position (``crossfeed_position.commit_ts``): it moves
    only when a whole source transaction is committed in the database."""
    import psycopg

    schema = f"bench_{uuid.uuid4().hex[:6]}"
    pipeline = Pipeline(janitor, a, b, topic, f"{postgres_uri}?schema={schema}")
    began = time.monotonic()
    pids = pipeline.start()
    rss = PeakRss(pids)
    rss.start()
    cost = cost_meter(pids, database=True)
    try:
        with psycopg.connect(postgres_uri, autocommit=True) as conn:
            first_at = _wait_applied(conn, schema, 0, 1200, pipeline)
            _wait_applied(conn, schema, last_commit_ts - 1, 1200, pipeline)
            done_at = time.monotonic()
            seconds = max(done_at - first_at, 1e-3)
            result: dict[str, Any] = {
                "events": events,
                "rows_per_s": round(events / seconds, 1),
                "transactions_per_s": round(transactions / seconds, 1),
                "startup_s": round(first_at - began, 1),
                "cpu_us_per_change": cpu_per_change(cost, (first_at, done_at), events),
            }
            rate = max(result["rows_per_s"] / 2 / 2, 1.0)  # transfers: two rows each
            phase = _PostgresLag(postgres_uri, schema, pids, pipeline)
            half = transfers_at(a, topic, rate, lag_seconds)
            summary, result["lag_cores"], result["lag_ms"] = phase.run(conn, half)
            result["lag_rate_events_per_s"] = round(rate * 2, 1)
            result["lag_offered_events_per_s"] = offered(summary)
            # Then the steady rate, the same on every machine.
            fixed = transfers_at(a, topic, STEADY_EVENTS_PER_S / 2, lag_seconds)
            result["lag_steady"] = steady_figures(*phase.run(conn, fixed))
        result["peak_rss_mb"] = rss.finish()
        result["ceiling"] = upsert_ceiling(postgres_uri, events)
        result["of_ceiling"] = round(result["rows_per_s"] / result["ceiling"]["rows_per_s"], 3)
        return result
    finally:
        rss.stopping.set()
        cost.stop()
        pipeline.stop()
        with contextlib.suppress(Exception), psycopg.connect(postgres_uri, autocommit=True) as c:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@dataclass
class _PostgresLag:
    """A lag phase into PostgreSQL: the database's staleness — now minus the newest
    applied commit_ts, sampled every 100 ms while the phase's transfers arrive, from the
    moment the first of them is applied (before, it would measure the idle gap)."""

    uri: str
    schema: str
    pids: dict[str, int]
    pipeline: Pipeline

    def run(
        self, conn: Any, write: Callable[[], Summary]
    ) -> tuple[Summary, dict[str, float], dict[str, float | None]]:
        import psycopg

        samples: list[tuple[float, int]] = []  # (when, applied commit_ts), µs
        sampling = threading.Event()

        def sample() -> None:
            with psycopg.connect(self.uri, autocommit=True) as own:
                while not sampling.wait(0.1):
                    applied = _applied_ts(own, self.schema)
                    if applied:
                        samples.append((time.time() * 1_000_000, applied))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            summary, cores = lag_phase(self.pids, write, database=True)
        finally:
            sampling.set()
            sampler.join(5)
        _wait_applied(conn, self.schema, summary.last_commit_ts - 1, 300, self.pipeline)
        staleness = [
            (now - applied) / 1000 for now, applied in samples if applied >= summary.first_commit_ts
        ]
        return summary, cores, rounded(percentiles(staleness))


def _wait_target(
    watch: TargetWatch, count: int, pipeline: Pipeline, timeout_s: float, idle_s: float
) -> bool:
    """:meth:`TargetWatch.wait_for`, with an error as soon as one of ``pipeline``'s
    processes has stopped."""
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        if watch.wait_for(count, timeout_s=min(left, 5.0), idle_s=idle_s):
            return True
        pipeline.check_running()
        if watch.last_at and time.monotonic() - watch.last_at > idle_s:
            return False
    return watch.count >= count


def _wait_applied(
    conn: Any, schema: str, commit_ts: int, timeout_s: float, pipeline: Pipeline
) -> float:
    """Until the sink's applied commit_ts is above ``commit_ts`` (give the newest written
    minus one to wait for it); returns when (monotonic). An error as soon as one of
    ``pipeline``'s processes has stopped."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pipeline.check_running()
        applied = _applied_ts(conn, schema)
        if applied is not None and applied > commit_ts:
            return time.monotonic()
        time.sleep(0.1)
    raise RuntimeError(f"PostgreSQL schema {schema} did not reach commit_ts {commit_ts}")


def _applied_ts(conn: Any, schema: str) -> int | None:
    try:
        row = conn.execute(f'SELECT max(commit_ts) FROM "{schema}".crossfeed_position').fetchone()
    except Exception:
        return None
    return None if row is None or row[0] is None else int(row[0])


def upsert_ceiling(postgres_uri: str, rows: int, batch: int = 1000) -> dict[str, Any]:
    """The database's own rate for the same rows: batched upserts by primary key in
    transactions of ``batch`` rows, pipelined, no crossfeed in between."""
    import psycopg

    table = f"bench_ceiling_{uuid.uuid4().hex[:6]}"
    with psycopg.connect(postgres_uri) as conn:
        conn.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, balance bigint)')
        conn.commit()
        began = time.monotonic()
        sql = (
            f'INSERT INTO "{table}" (id, balance) VALUES (%s, %s) '
            "ON CONFLICT (id) DO UPDATE SET balance = EXCLUDED.balance"
        )
        with conn.cursor() as cur:
            for start in range(0, rows, batch):
                cur.executemany(
                    sql, [(n % ACCOUNTS, n) for n in range(start, min(start + batch, rows))]
                )
                conn.commit()
        seconds = time.monotonic() - began
        conn.execute(f'DROP TABLE "{table}"')
        conn.commit()
    return {"rows_per_s": round(rows / seconds, 1), "batch_rows": batch}


def run(
    janitor: Janitor,
    a: dict[str, Any],
    b: dict[str, Any],
    *,
    transfers: int,
    lag_seconds: float,
    postgres_uri: str | None,
    say: Any,
) -> dict[str, Any]:
    """Every ordered-feed figure of one benchmark run (a section of the result JSON)."""
    topic = f"bench-bank-{uuid.uuid4().hex[:6]}"
    janitor.topics(a, [topic])
    out: dict[str, Any] = {"available": True, "transfers": transfers}
    out["produce"] = write_backlog(a, topic, transfers)
    say(f"ordered: backlog of {out['produce']['events']:,} changes written")
    events = int(out["produce"]["events"])
    out["spark_passthrough"] = spark_passthrough(janitor, a, b, topic, events)
    say(f"ordered: Spark pass-through {out['spark_passthrough']['events_per_s']:,} events/s")
    out["kafka"] = kafka_target(janitor, a, b, topic, out["produce"], lag_seconds)
    ratio = out["kafka"]["events_per_s"] / out["spark_passthrough"]["events_per_s"]
    out["kafka"]["of_spark_passthrough"] = round(ratio, 3)
    say(f"ordered: into Kafka {out['kafka']['events_per_s']:,} events/s ({ratio:.0%} of Spark)")
    if postgres_uri:
        lag_events = int(out["kafka"].get("lag_phase_events", 0))
        out["postgres"] = postgres_target(
            janitor,
            a,
            b,
            topic,
            events + lag_events,
            int(out["produce"]["transactions"]) + lag_events // 2 + 1,
            max(
                int(out["produce"]["last_commit_ts"]),
                int(out["kafka"].get("lag_phase_last_commit_ts", 0)),
            ),
            postgres_uri,
            lag_seconds,
        )
        say(f"ordered: into PostgreSQL {out['postgres']['rows_per_s']:,} rows/s")
    return out
