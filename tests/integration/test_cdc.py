"""PostgreSQL -> Debezium on Kafka Connect -> crossfeed (puller, Spark sorter, sink) ->
PostgreSQL: the SQL bank workload (tests/support + crossfeed/workload/sql_bank.py) in
real multi-statement transactions over two tables with foreign keys, from concurrent
sessions, while a sampler reads the target.

What every test checks: the sampler never saw a torn total or a ledger row without its
accounts, and at the end both tables on the target equal the source's, row for row (so
nothing was lost or applied twice).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import psutil
import psycopg
import pytest

from crossfeed.dlq import ERROR_CLASS, ERROR_MESSAGE, FEED, STAGE
from crossfeed.kafka import clients
from crossfeed.local import postgres, processes, stack
from crossfeed.wire import topics
from crossfeed.workload import sql_bank
from tests.support.cdc import CapturedDatabase
from tests.support.postgres import drop_schema_after_restarts
from tests.support.verify import read_many

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.e2e]

ACCOUNTS = 40
SETTINGS = {
    "puller": {"resolved_interval_ms": 100},
    "sorter": {"trigger_interval_ms": 200},
}


@pytest.fixture
def pg_schema(clusters: Any, unique: Any) -> Any:
    schema = unique("cdc").replace("-", "_").replace(".", "_").lower()[:60]
    yield schema
    drop_schema_after_restarts(clusters.postgres_uri, schema)


def _start_feed(services: Any, clusters: Any, db: CapturedDatabase, schema: str) -> Any:
    return services.start_feed(
        "cdc-bank",
        clusters,
        [db.topics],
        mode="ordered",
        sink_uri=f"{clusters.postgres_uri}?schema={schema}",
        pullers=1,
        sorters=1,
        sinks=1,
        config={"input": "debezium"},
        settings=SETTINGS,
        timeout=120,
    )


def _wait_equal(db: CapturedDatabase, target_uri: str, schema: str, feed: Any, timeout: float):
    """Until both tables on the target equal the source's."""
    deadline = time.monotonic() + timeout
    differs = ""
    while time.monotonic() < deadline:
        compared = sql_bank.compare(db.uri, target_uri, schema)
        differs = "; ".join(c.line() for c in compared if not c.equal)
        if not differs:
            return
        time.sleep(1)
    raise AssertionError(f"the target never equalled the source: {differs}\n{feed.logs()}")


def test_sql_bank_arrives_whole_in_commit_order_across_kills(
    clusters, captured_db, pg_schema, services
):
    db = captured_db
    total = sql_bank.create(db.uri, ACCOUNTS)  # these rows arrive by the snapshot
    db.register(heartbeat_ms=500)
    db.wait_running()
    feed = _start_feed(services, clusters, db, pg_schema)
    sampler = sql_bank.Sampler(clusters.postgres_uri, pg_schema, ACCOUNTS, total)
    sampler.start()
    workload = sql_bank.Transfers(db.uri, ACCOUNTS, sessions=4, total=6_000, rate=100).start()
    try:
        time.sleep(2)
        with psycopg.connect(db.uri, autocommit=True) as conn:  # a column added mid-run
            conn.execute("ALTER TABLE transfers ADD COLUMN note text")
            conn.execute("INSERT INTO transfers (src, dst, amount, note) VALUES (1, 2, 0, 'new')")
        time.sleep(2)
        stack.restart_connect(hard=True)  # Debezium sends what it had not committed again
        feed.pullers[0].restart(hard=True)
        time.sleep(2)
        feed.sorters[0].restart(hard=True)
        time.sleep(2)
        feed.sinks[0].restart(hard=True)
        workload.stop.set()
        workload.join(60)
        assert not workload.errors, workload.errors
        assert workload.done > 1_000
        _wait_equal(db, clusters.postgres_uri, pg_schema, feed, 240)
        columns = (*sql_bank.TRANSFER_COLUMNS, "note")
        assert sql_bank.rows(db.uri, "public", "transfers", columns) == sql_bank.rows(
            clusters.postgres_uri, pg_schema, "transfers", columns
        )
    finally:
        sampler.stop()
    assert not sampler.torn, f"the target showed states the source never had: {sampler.torn[:5]}"
    assert sampler.samples > 50, f"only {sampler.samples} samples of the target"
    feed.assert_running()


class PeakRss(threading.Thread):
    """The highest resident memory of each process while it runs (process tree: the
    sorter's JVM is a child of its Python driver)."""

    def __init__(self, procs: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.procs = procs
        self.peak: dict[str, int] = dict.fromkeys(procs, 0)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            for name, proc in self.procs.items():
                with contextlib.suppress(psutil.Error, TypeError):
                    root = psutil.Process(proc.pid)
                    rss = sum(p.memory_info().rss for p in [root, *root.children(True)])
                    self.peak[name] = max(self.peak[name], rss)

    def stop(self) -> dict[str, int]:
        self.done.set()
        self.join(5)
        return self.peak


def _checkpoint_ts(sink: Any) -> int:
    status = sink.status() or {}
    return int(status.get("checkpoint_ts_us") or 0)


def _dead_letters(clusters: Any, feed: str) -> list[Any]:
    records = read_many(clusters.b.config, [topics.DLQ])[topics.DLQ]
    return [r for part in records.values() for r in part if r.header(FEED) == feed.encode()]


def test_idle_heartbeats_bad_input_a_100k_row_transaction_and_a_source_restart(
    clusters, captured_db, pg_schema, services
):
    db = captured_db
    total = sql_bank.create(db.uri, ACCOUNTS)
    with psycopg.connect(db.uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE oddities (id integer PRIMARY KEY, tags integer[])")
        conn.execute("CREATE TABLE bulk (id integer PRIMARY KEY, payload text NOT NULL)")
    db.register(heartbeat_ms=500)
    db.wait_running()
    feed = _start_feed(services, clusters, db, pg_schema)
    sink = feed.sinks[0]
    # The snapshot arrives, then an idle database still moves consistency_ts (heartbeats).
    _wait_equal(db, clusters.postgres_uri, pg_schema, feed, 180)
    first = _checkpoint_ts(sink)
    time.sleep(4)
    assert _checkpoint_ts(sink) > first, "consistency_ts did not move with the source idle"
    # Bad input: a record on a captured topic that is not a Debezium event, and a type the
    # sink does not map; the changes around them arrive.
    producer = clients.producer(clusters.a.config)
    producer.produce(f"{db.prefix}.public.accounts", value=b"not a debezium event", key=b"junk")
    producer.flush(10)
    with psycopg.connect(db.uri, autocommit=True) as conn:
        conn.execute("INSERT INTO oddities VALUES (1, '{1,2}')")
    peaks = PeakRss({p.instance: p for p in feed.processes})
    peaks.start()
    sampler = sql_bank.Sampler(clusters.postgres_uri, pg_schema, ACCOUNTS, total)
    sampler.start()
    bulk_counts: set[int] = set()
    watching = threading.Event()

    def watch_bulk() -> None:  # the 100,000 rows appear all at once or not at all
        with psycopg.connect(clusters.postgres_uri, autocommit=True) as conn:
            while not watching.wait(0.05):
                with contextlib.suppress(psycopg.errors.UndefinedTable):
                    row = conn.execute(f'SELECT count(*) FROM "{pg_schema}".bulk').fetchone()
                    bulk_counts.add(int(row[0]) if row else -1)

    watcher = threading.Thread(target=watch_bulk, daemon=True)
    watcher.start()
    try:
        # One source transaction of 100,000 rows, then the source database restarted
        # while the feed still applies it, then more transfers.
        with psycopg.connect(db.uri, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO bulk SELECT g, repeat('x', 200) FROM generate_series(1, 100000) g"
            )
        source = postgres.source()
        source.stop()
        source.start()
        assert processes.wait_until(source.answers, 30)
        sql_bank.Transfers(db.uri, ACCOUNTS, sessions=2, total=200).start().join(120)
        _wait_equal(db, clusters.postgres_uri, pg_schema, feed, 300)
        bulk = sql_bank.rows(clusters.postgres_uri, pg_schema, "bulk", ("id", "payload"))
        assert len(bulk) == 100_000
    finally:
        peak = peaks.stop()
        sampler.stop()
        watching.set()
        watcher.join(5)
    assert bulk_counts <= {0, 100_000}, f"the bulk transaction was seen torn: {bulk_counts}"
    assert not sampler.torn, f"the target showed states the source never had: {sampler.torn[:5]}"
    print("peak RSS (MiB): " + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in peak.items()))
    letters: list[Any] = []
    deadline = time.monotonic() + 30
    while len(letters) < 2 and time.monotonic() < deadline:
        letters = _dead_letters(clusters, feed.name)
        time.sleep(0.5)
    classes = sorted((r.header(ERROR_CLASS) or b"").decode() for r in letters)
    assert classes == ["UndecodableValue", "UnmappableType"], classes
    unmappable = next(r for r in letters if r.header(ERROR_CLASS) == b"UnmappableType")
    assert b"tags" in (unmappable.header(ERROR_MESSAGE) or b"")
    assert all(r.header(STAGE) == b"sink" for r in letters)
    feed.assert_running()
