"""``crossfeed bench --only active_active``: an active-active PostgreSQL pair
(docs/active-active.md) beside today's one-direction CDC feed, on the same two PostgreSQL
servers of the ``local up --active-active`` stack (postgres-a captured by Connect-A into
dc-a, postgres captured by Connect-B into dc-b), each phase on a database of its own made
the same way on both. One run, three phases:

1. **Debezium's publishing rate**: a backlog of SQL bank transfers written on side A with
   its connector registered, until Debezium's transaction topic holds it all
   (``cdc_figures.capture_rate``); R = half of it, in transfers/s.
2. **reference**: one direction only, a plain ordered feed with ``input: debezium``
   (puller, Spark sorter, PostgreSQL sink) from dc-a into B's database, the same tables:
   it applies the backlog, then side A writes at R for ``lag_seconds``.
3. **active-active**: the pair made by the pair library as ``crossfeed pair create``
   makes it (its SQL on both databases, ``accounts.balance`` a counter with ``REPLICA
   IDENTITY FULL``, a connector per side; the two feeds run here without a coordinator),
   both sides writing at R each over the same accounts for ``lag_seconds``.

Per phase and direction: commit→visible lag p50/p99 of the other side's ledger rows (the
ledger's ids are odd on A, even on B: ``sql_bank.disjoint_ids``), CPU per change of every
process (each with its children) from the first transfer written to the last row visible,
peak RSS; in phase 3 conflicts per second (the sinks' ``crossfeed_sink_conflicts_total``,
and the rows ``crossfeed_conflicts`` gained). Then active-active against the reference
(``aa_figures.ratios``: at most 1.2 asked), and both databases equal with the opening
total on both.
"""

from __future__ import annotations

import contextlib
import re
import resource
import time
import traceback
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
from confluent_kafka import TopicPartition

from crossfeed.bench import aa_figures
from crossfeed.bench.cdc_figures import ROWS_PER_TRANSFER, apply_rate, capture_rate, half_load
from crossfeed.bench.cdc_watch import (
    LagPoller,
    execute_quietly,
    max_id,
    on_server,
    wait_transfers,
)
from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.measure import PeakRss, ProcessCost, broker_pids
from crossfeed.bench.ordered import Pipeline
from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.kafka import clients
from crossfeed.local import captured, postgres, processes, stack
from crossfeed.pair import ops
from crossfeed.workload import sql_bank

ACCOUNTS = 200  # few enough that both sides often change the same account within a lag
SESSIONS = 4  # per side
TABLES = ("accounts", "transfers")
ROLES = ("puller", "sorter", "sink")
WARMUP_TRANSFERS = 40  # per side, before the measured phase: the feeds' first batches
BENCH = "bench (writers, pollers)"
PARITY = {"a-to-b": 1, "b-to-a": 0}  # the ids the source side of each direction writes

Say = Callable[[str], None]


def _own_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Bench:
    """The databases, connectors and feeds of one run (module docstring)."""

    def __init__(
        self, janitor: Janitor, a: dict[str, Any], b: dict[str, Any], tag: str, phase: str
    ) -> None:
        self.janitor, self.a, self.b = janitor, a, b
        self.db = f"bench_aa_{tag}_{phase}"
        self.pair = f"bench-aa-{tag}"
        self.uri = {
            "a": on_server(postgres.SOURCE_URI, self.db),
            "b": on_server(postgres.URI, self.db),
        }
        self.connect = {"a": stack.connect_worker().url, "b": stack.connect_worker_b().url}
        self.connectors: list[tuple[str, str]] = []  # (side, name)
        self.pipelines: dict[str, Pipeline] = {}
        self.started: list[Pipeline] = []  # every one, for the logs of a failed run
        self.metrics: dict[str, int] = {}  # direction -> its sink's /metrics port

    # -- databases and connectors ---------------------------------------------------------

    def prepare(self) -> int:
        """The bank's tables in a new database on both servers, the same opening accounts,
        disjoint ledger ids; returns the opening total."""
        total = 0
        for side, server in (("a", postgres.SOURCE_URI), ("b", postgres.URI)):
            with psycopg.connect(on_server(server, "postgres"), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.db}"')
            total = sql_bank.create(self.uri[side], ACCOUNTS)
            sql_bank.disjoint_ids(self.uri[side], odd=side == "a")
        return total

    def _connector_topics(self, prefix: str) -> list[str]:
        return [f"{prefix}.public.{t}" for t in TABLES] + [
            f"{prefix}.transaction",
            f"__debezium-heartbeat.{prefix}",
        ]

    def register_reference(self) -> str:
        """Side A's connector for the reference feed (the pair's tables only, no snapshot:
        both databases start equal); returns its topic prefix."""
        prefix = f"{self.pair}-ref"
        self.janitor.topics(self.a, self._connector_topics(prefix))
        tables = [f"public\\.{t}" for t in TABLES]
        config = connector.connector_config(
            self.uri["a"], prefix, tables=tables, snapshot_mode="no_data"
        )
        self.connectors.append(("a", prefix))
        connector.register(self.connect["a"], prefix, config)
        connector.wait_running(self.connect["a"], prefix, 120)
        return prefix

    def wait_published(self, prefix: str, transfers: int, timeout_s: float = 900) -> None:
        """Until the transaction topic of ``prefix`` (on dc-a) holds ``transfers``' BEGIN
        and END records."""
        consumer = clients.consumer(self.a, **{"group.id": f"bench-aa-{uuid.uuid4().hex[:6]}"})
        deadline = time.monotonic() + timeout_s
        high = 0
        try:
            while time.monotonic() < deadline:
                with contextlib.suppress(Exception):  # not created yet
                    tp = TopicPartition(f"{prefix}.transaction", 0)
                    high = consumer.get_watermark_offsets(tp, timeout=5)[1]
                if high >= 2 * transfers:
                    return
                time.sleep(0.2)
        finally:
            consumer.close()
        raise RuntimeError(f"Debezium published {high // 2} of {transfers} transactions")

    def remove_connector(self, side: str, name: str) -> None:
        with contextlib.suppress(ConnectError):
            connector.remove(self.connect[side], name)
        slot = connector.connector_config(self.uri[side], name)["slot.name"]
        server = postgres.SOURCE_URI if side == "a" else postgres.URI
        admin = on_server(server, "postgres")
        with contextlib.suppress(psycopg.Error), psycopg.connect(admin, autocommit=True) as conn:
            captured.drop_slots(conn, [slot])

    def make_pair(self, say: Say) -> list[dict[str, Any]]:
        """The pair as ``crossfeed pair create`` makes it; returns its two feeds' bodies
        (run here by :meth:`start_pair`, not by a coordinator)."""
        bodies: list[dict[str, Any]] = []

        class Feeds:
            def put_feed(self, body: dict[str, Any]) -> str:
                bodies.append(body)
                return "created"

            def feed(self, name: str) -> dict[str, Any] | None:
                return None

            def remove_feed(self, name: str) -> None:
                return None

        request = ops.PairRequest.model_validate(
            {
                "name": self.pair,
                "a_database": self.uri["a"],
                "b_database": self.uri["b"],
                "tables": [f"public.{t}" for t in TABLES],
                "counters": ["accounts.balance"],
                "connect_a": self.connect["a"],
                "connect_b": self.connect["b"],
                "snapshot": "no_data",  # both databases hold the same rows already
            }
        )
        for side, conf in (("a", self.a), ("b", self.b)):
            name = f"{self.pair}-{side}"
            self.janitor.topics(conf, self._connector_topics(name))
            self.connectors.append((side, name))
        ops.create(request, Feeds(), lambda line: say(f"active-active: {line}"))
        for side, name in self.connectors[-2:]:
            connector.wait_running(self.connect[side], name, 120)
        return bodies

    # -- feeds ------------------------------------------------------------------------------

    def start_reference(self, prefix: str) -> dict[str, int]:
        pipeline = Pipeline(
            self.janitor,
            self.a,
            self.b,
            [rf"{re.escape(prefix)}\.public\.({'|'.join(TABLES)})"],
            f"{self.uri['b']}?schema=public",
            roles=ROLES,
            options={"input": "debezium", "debezium.topic.prefix": prefix},
            feed=f"{self.pair}-ref",
        )
        self.pipelines["a-to-b"] = pipeline
        self.started.append(pipeline)
        return {f"a-to-b {label}": pid for label, pid in pipeline.start().items()}

    def start_pair(self, bodies: list[dict[str, Any]]) -> dict[str, int]:
        pids: dict[str, int] = {}
        for body in bodies:
            direction = "a-to-b" if body["source"] == "dc-a" else "b-to-a"
            port = processes.free_port()
            pipeline = Pipeline(
                self.janitor,
                self.a,
                self.b,
                body["topics"],
                body["sink-uri"],
                roles=ROLES,
                options={"input": body["input"], **body["config"]},
                source=body["source"],
                feed=body["name"],
                args={"sink": ["--metrics-port", str(port)]},
            )
            self.pipelines[direction] = pipeline
            self.started.append(pipeline)
            self.metrics[direction] = port
            pids |= {f"{direction} {label}": pid for label, pid in pipeline.start().items()}
        return pids

    def stop_feeds(self) -> None:
        for pipeline in self.pipelines.values():
            pipeline.stop()
        self.pipelines.clear()

    def logs(self) -> str:
        """The last lines of every log of every feed started."""
        out = []
        for pipeline in self.started:
            for label in ROLES:
                log = pipeline.workdir / f"{label}.log"
                if log.exists():
                    out.append(f"--- {pipeline.feed} {label}:\n{processes.tail(log, 8)}")
        return "\n".join(out) or "(no feed started)"

    def conflicts(self) -> dict[str, dict[str, float]]:
        """Per direction: its sink's conflict counters, and the rows of
        ``crossfeed_conflicts`` in its target database (``recorded``)."""
        out: dict[str, dict[str, float]] = {}
        for direction, port in self.metrics.items():
            found: dict[str, float] = {}
            feed = self.pipelines[direction].feed
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{port}/metrics"
                with urllib.request.urlopen(url, timeout=5) as answer:
                    found = aa_figures.conflicts_of(answer.read().decode(), feed)
            target = self.uri["b" if direction == "a-to-b" else "a"]
            with contextlib.suppress(psycopg.Error), psycopg.connect(target) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM public.crossfeed_conflicts WHERE feed = %s", (feed,)
                ).fetchone()
                found["recorded"] = float(row[0]) if row else 0.0
            out[direction] = found
        return out

    def cleanup(self) -> None:
        self.stop_feeds()
        for side, name in self.connectors:
            self.remove_connector(side, name)
        for server in (postgres.SOURCE_URI, postgres.URI):
            admin = on_server(server, "postgres")
            execute_quietly(admin, f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')


def _shared_pids() -> dict[str, int]:
    """Everything besides the feeds that a change costs: both brokers, both PostgreSQL
    servers, both Connect workers (reported beside)."""
    pids = {f"{n} broker": pid for n, pid in broker_pids().items()}
    for label, pid in (
        ("postgres-a", postgres.source(active_active=True).pid()),
        ("postgres-b", postgres.target(active_active=True).pid()),
        ("connect-a (Debezium)", stack.connect_worker().pid()),
        ("connect-b (Debezium)", stack.connect_worker_b().pid()),
    ):
        if pid:
            pids[label] = pid
    return pids


def _write(uri: str, *, total: int = 0, rate: float = 0.0) -> sql_bank.Transfers:
    return sql_bank.Transfers(uri, ACCOUNTS, sessions=SESSIONS, total=total, rate=rate).start()


def _finish(work: sql_bank.Transfers) -> None:
    work.join()
    if work.errors:
        raise RuntimeError(f"the workload failed: {work.errors[:3]}")


def lag_phase(
    bench: Bench, directions: list[str], rate: float, seconds: float, pids: dict[str, int]
) -> dict[str, Any]:
    """Each direction's source side writes ``rate`` transfers/s for ``seconds``; the lag
    of its ledger rows on the other side, the CPU per change of every process from the
    first transfer written to the last row visible, conflicts per second."""
    pollers: dict[str, LagPoller] = {}
    for direction in directions:
        source, target = ("a", "b") if direction == "a-to-b" else ("b", "a")
        after = max_id(bench.uri[source], "public", PARITY[direction])
        pollers[direction] = LagPoller(bench.uri[target], "public", after, PARITY[direction])
        pollers[direction].start()
    cost = ProcessCost(pids, tree=True)
    conflicts_before = bench.conflicts()
    own, began = _own_cpu_s(), time.monotonic()
    writers: dict[str, sql_bank.Transfers] = {}
    try:
        for direction in directions:
            source = "a" if direction == "a-to-b" else "b"
            writers[direction] = _write(bench.uri[source], rate=rate)
        time.sleep(seconds)
        for work in writers.values():
            work.stop.set()
        for work in writers.values():
            _finish(work)
        wrote = time.monotonic() - began
        arrived = {d: pollers[d].wait_rows(writers[d].done, 300) for d in directions}
        ended = time.monotonic()
    except BaseException:
        cost.stop()
        for poller in pollers.values():
            poller.finish()
        raise
    own = _own_cpu_s() - own
    conflicts_after = bench.conflicts()
    spent = cost.finish((began, ended))
    cpu_s = {label: c["cpu_window_s"] for label, c in spent.items()}
    cpu_s[BENCH] = own
    changes = {d: writers[d].done * ROWS_PER_TRANSFER for d in directions}
    out: dict[str, Any] = {
        "asked_transfers_per_s": round(rate, 1),
        "seconds": round(ended - began, 1),
        "lag": {},
        "cpu_us_per_change": aa_figures.cpu_per_change(
            {k: v for k, v in cpu_s.items() if k != BENCH}, changes
        ),
        "bench_cpu_us_per_change": round(own / max(sum(changes.values()), 1) * 1e6, 1),
        "cores": {label: round(s / max(ended - began, 1e-3), 2) for label, s in cpu_s.items()},
    }
    out["cores"]["total"] = round(sum(cpu_s.values()) / max(ended - began, 1e-3), 2)
    for direction in directions:
        out["lag"][direction] = pollers[direction].finish() | {
            "transfers": writers[direction].done,
            "offered_transfers_per_s": round(writers[direction].done / max(wrote, 1e-3), 1),
            "all_arrived": arrived[direction],
            "deadlocks_retried": writers[direction].retried,
        }
    if bench.metrics:
        out["conflicts_per_s"] = {
            d: aa_figures.conflict_rates(
                conflicts_before.get(d, {}), conflicts_after.get(d, {}), wrote
            )
            for d in directions
        }
        out["conflicts"] = conflicts_after
    return out


def _equal(bench: Bench, total: int) -> dict[str, Any]:
    """Both databases row for row (the bank's columns), and each one's total balance."""
    compared = sql_bank.compare(bench.uri["a"], bench.uri["b"], "public")
    totals = {}
    for side in ("a", "b"):
        with psycopg.connect(bench.uri[side]) as conn:
            row = conn.execute("SELECT sum(balance) FROM public.accounts").fetchone()
            totals[side] = int(row[0]) if row and row[0] is not None else None
    return {
        "equal": all(c.equal for c in compared),
        "tables": [c.line() for c in compared],
        "total_balance": totals,
        "opening_total": total,
        "totals_kept": all(t == total for t in totals.values()),
    }


def _wait_equal(bench: Bench, total: int, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    found = _equal(bench, total)
    while not (found["equal"] and found["totals_kept"]) and time.monotonic() < deadline:
        time.sleep(2)
        found = _equal(bench, total)
    return found


def _warm_up(bench: Bench, directions: list[str], timeout_s: float) -> float:
    """A few transfers per direction until they are visible on the other side: the
    feeds' start-up (Spark's first micro-batches) stays out of the measured phase;
    returns how long it took."""
    began = time.monotonic()
    pollers = {}
    for direction in directions:
        source, target = ("a", "b") if direction == "a-to-b" else ("b", "a")
        after = max_id(bench.uri[source], "public", PARITY[direction])
        pollers[direction] = LagPoller(bench.uri[target], "public", after, PARITY[direction])
        pollers[direction].start()
    for direction in directions:
        _finish(_write(bench.uri["a" if direction == "a-to-b" else "b"], total=WARMUP_TRANSFERS))
    try:
        for direction, poller in pollers.items():
            left = max(1.0, began + timeout_s - time.monotonic())
            if not poller.wait_rows(WARMUP_TRANSFERS, left):
                raise RuntimeError(
                    f"{direction}: {len(poller.book.seen)} of {WARMUP_TRANSFERS} warm-up "
                    f"transfers visible after {timeout_s:.0f}s (logs: {bench.logs()})"
                )
    finally:
        for poller in pollers.values():
            poller.finish()
    return round(time.monotonic() - began, 1)


def run(
    janitor: Janitor,
    a: dict[str, Any],
    b: dict[str, Any],
    *,
    transfers: int,
    lag_seconds: float,
    say: Say,
    rate: float = 0.0,
) -> dict[str, Any]:
    """The three phases (module docstring): the result JSON's ``active_active`` section.
    ``rate``: transfers/s per direction instead of half of Debezium's publishing rate (one
    a busy machine's writers reach in both phases; Debezium's rate is still measured)."""
    out: dict[str, Any] = {
        "available": True,
        "transfers": transfers,
        "accounts": ACCOUNTS,
        "sessions_per_side": SESSIONS,
        "lag_seconds": lag_seconds,
    }
    tag = uuid.uuid4().hex[:6]
    # A database of its own per phase on both servers, made the same way: today's CDC sink
    # leaves its bookkeeping column in the tables it writes, the pair's sink then fails
    # on them (bench/README.md).
    bench = Bench(janitor, a, b, tag, "ref")
    pair = Bench(janitor, a, b, tag, "pair")
    shared = _shared_pids()
    rss = PeakRss(shared)
    rss.start()
    peaks: dict[str, float] = {}
    try:
        total = bench.prepare()
        out["opening_total"] = total
        # 1. Debezium's publishing rate, from a backlog written on A.
        prefix = bench.register_reference()
        written = time.monotonic()
        _finish(_write(bench.uri["a"], total=transfers))
        bench.wait_published(prefix, transfers)
        out["capture"] = capture_rate(transfers, time.monotonic() - written)
        out["rate_asked"] = "given" if rate else "half of Debezium's"
        rate = rate or half_load(out["capture"]["capture_rows_per_s"])
        out["rate_transfers_per_s"] = round(rate, 1)
        say(
            f"active-active: Debezium published {out['capture']['capture_rows_per_s']:,} "
            f"rows/s; each direction at {rate:,.1f} transfers/s"
        )
        # 2. The reference: one direction, today's CDC feed, applies the backlog first.
        began = time.monotonic()
        pids = bench.start_reference(prefix)
        feed_rss = PeakRss(pids)
        feed_rss.start()
        try:
            first_at, last_at = wait_transfers(bench.uri["b"], "public", transfers, 1800)
            reference: dict[str, Any] = {"backlog": apply_rate(transfers, first_at, last_at)}
            reference["startup_s"] = round(first_at - began, 1)
            say(f"active-active: reference applied the backlog; lag phase at {rate:,.1f}/s")
            reference |= lag_phase(bench, ["a-to-b"], rate, lag_seconds, pids | shared)
        finally:
            bench.stop_feeds()
            reference_rss = feed_rss.finish()
        reference["peak_rss_mb"] = reference_rss
        reference["databases"] = _wait_equal(bench, total, 60)
        out["reference"] = reference
        say(f"active-active: reference lag {reference['lag']['a-to-b']['lag_ms']}")
        bench.remove_connector("a", prefix)
        # 3. Active-active: the pair, both sides writing.
        if pair.prepare() != total:
            raise RuntimeError("the pair's databases do not open with the reference's total")
        bodies = pair.make_pair(say)
        began = time.monotonic()
        pids = pair.start_pair(bodies)
        feed_rss = PeakRss(pids)
        feed_rss.start()
        try:
            active: dict[str, Any] = {
                "startup_s": _warm_up(pair, list(aa_figures.DIRECTIONS), 600),
                "feeds": [b["name"] for b in bodies],
            }
            say(f"active-active: both feeds running after {active['startup_s']} s; lag phase")
            both = list(aa_figures.DIRECTIONS)
            active |= lag_phase(pair, both, rate, lag_seconds, pids | shared)
            active["databases"] = _wait_equal(pair, total, 300)
        finally:
            pair.stop_feeds()
            active_rss = feed_rss.finish()
        active["peak_rss_mb"] = active_rss
        out["active_active"] = active
        out["ratios"] = aa_figures.ratios(reference, active)
        say(f"active-active: lag {active['lag']}; ratios {out['ratios']}")
    except Exception as err:  # what was measured before stays in the section
        logs = f"{bench.logs()}\n{pair.logs()}"
        out["error"] = f"{type(err).__name__}: {err}\nlogs:\n{logs}"
        out["trace"] = traceback.format_exc()[-3000:]
        say(f"active-active: FAILED: {type(err).__name__}: {str(err).splitlines()[0][:300]}")
    finally:
        peaks = rss.finish()
        bench.cleanup()
        pair.cleanup()
    out["peak_rss_mb_shared"] = peaks
    return out
