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

import psycopg
import pytest

from crossfeed.bench.measure import PeakRss
from crossfeed.dlq import ERROR_CLASS, ERROR_MESSAGE, FEED, STAGE
from crossfeed.kafka import clients
from crossfeed.local import postgres, processes, stack
from crossfeed.wire import topics
from crossfeed.workload import sql_bank
from tests.support.cdc import CapturedDatabase
from tests.support.polling import wait_for
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


def _start_feed(
    services: Any,
    clusters: Any,
    db: CapturedDatabase,
    schema: str,
    sink_uri: str = "",
    config: dict[str, Any] | None = None,
) -> Any:
    """The feed's puller, sorter and sink; into PostgreSQL's ``schema`` unless ``sink_uri``;
    ``config``: more of the feed's options."""
    return services.start_feed(
        "cdc-bank",
        clusters,
        [db.topics],
        mode="ordered",
        sink_uri=sink_uri or f"{clusters.postgres_uri}?schema={schema}",
        pullers=1,
        sorters=1,
        sinks=1,
        config={"input": "debezium", **(config or {})},
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
    bank_across_kills(clusters, db, pg_schema, feed, total, transfers=6_000)


def bank_across_kills(
    clusters: Any, db: CapturedDatabase, pg_schema: str, feed: Any, total: int, transfers: int
) -> None:
    """The SQL bank from four sessions into the running ``feed`` while a column is added and
    Connect, the puller, the sorter and the sink are killed in turn: the sampler never sees
    a torn state, and both tables end equal to the source's, the new column too."""
    sampler = sql_bank.Sampler(clusters.postgres_uri, pg_schema, ACCOUNTS, total)
    sampler.start()
    workload = sql_bank.Transfers(db.uri, ACCOUNTS, sessions=4, total=transfers, rate=100)
    workload.start()
    try:
        time.sleep(3)
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
        assert workload.done > transfers // 8
        _wait_equal(db, clusters.postgres_uri, pg_schema, feed, 240)
        columns = (*sql_bank.TRANSFER_COLUMNS, "note")
        assert sql_bank.rows(db.uri, "public", "transfers", columns) == sql_bank.rows(
            clusters.postgres_uri, pg_schema, "transfers", columns
        )
    finally:
        sampler.stop()
    assert not sampler.torn, f"the target showed states the source never had: {sampler.torn[:5]}"
    # The sampler watched the stream being applied, not just its end state: it caught the
    # target at more than one number of transfers (the sink applies a backlog in a few large
    # batches after each kill, so there are few such states), and sampled it repeatedly
    # (how often depends on the machine's load: 49 samples on a loaded CI run, ~1,900 alone).
    caught = len(sampler.transfer_counts)
    assert caught >= 2 and sampler.samples >= 20, (
        f"the target sampled at {caught} states in {sampler.samples} samples"
    )
    feed.assert_running()


class RowCounts(threading.Thread):
    """Every count of a target table seen while a feed applies one big transaction: it
    must appear all at once (a torn one shows as a count in between)."""

    def __init__(self, uri: str, schema: str, table: str) -> None:
        super().__init__(daemon=True)
        self.uri, self.sql = uri, f'SELECT count(*) FROM "{schema}"."{table}"'
        self.seen: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.uri, autocommit=True) as conn:
            while not self.done.wait(0.05):
                with contextlib.suppress(psycopg.errors.UndefinedTable):
                    row = conn.execute(self.sql).fetchone()
                    self.seen.add(int(row[0]) if row else -1)

    def stop(self) -> set[int]:
        self.done.set()
        self.join(5)
        return self.seen


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
        conn.execute("CREATE TABLE scratch (id integer PRIMARY KEY)")
        conn.execute("INSERT INTO scratch VALUES (1), (2), (3)")
    db.register(heartbeat_ms=500)
    db.wait_running()
    feed = _start_feed(services, clusters, db, pg_schema)
    sink = feed.sinks[0]
    # The snapshot arrives, then an idle database still moves consistency_ts (heartbeats):
    # once a quiet pause of the sorter (sorter.quiet_pause_ms, 5 s), plus a micro-batch.
    _wait_equal(db, clusters.postgres_uri, pg_schema, feed, 180)
    first = _checkpoint_ts(sink)
    wait_for(lambda: _checkpoint_ts(sink) > first, 30, "consistency_ts moved, the source idle")
    # Bad input: a record on a captured topic that is not a Debezium event, and a type the
    # sink does not map; the changes around them arrive.
    producer = clients.producer(clusters.a.config)
    producer.produce(f"{db.prefix}.public.accounts", value=b"not a debezium event", key=b"junk")
    producer.flush(10)
    with psycopg.connect(db.uri, autocommit=True) as conn:
        conn.execute("INSERT INTO oddities VALUES (1, '{1,2}')")
    peaks = PeakRss({p.instance: p.pid for p in feed.processes if p.pid})
    peaks.start()
    sampler = sql_bank.Sampler(clusters.postgres_uri, pg_schema, ACCOUNTS, total)
    sampler.start()
    bulk_counts = RowCounts(clusters.postgres_uri, pg_schema, "bulk")
    bulk_counts.start()
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
        with psycopg.connect(db.uri, autocommit=True) as conn:  # TRUNCATE where it stands
            conn.execute("TRUNCATE scratch")
            conn.execute("INSERT INTO scratch VALUES (4)")
        _wait_equal(db, clusters.postgres_uri, pg_schema, feed, 300)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            scratch = sql_bank.rows(clusters.postgres_uri, pg_schema, "scratch", ("id",))
            if scratch == [(4,)]:
                break
            time.sleep(0.5)
        assert scratch == [(4,)], f"after TRUNCATE and one insert the target holds {scratch}"
        bulk = sql_bank.rows(clusters.postgres_uri, pg_schema, "bulk", ("id", "payload"))
        assert len(bulk) == 100_000
    finally:
        peak = peaks.finish()
        sampler.stop()
        seen = bulk_counts.stop()
    assert seen <= {0, 100_000}, f"the bulk transaction was seen torn: {seen}"
    assert not sampler.torn, f"the target showed states the source never had: {sampler.torn[:5]}"
    print("peak RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in peak.items()))
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


def _read_all(config: dict[str, Any], topic_names: list[str]) -> list[Any]:
    found = read_many(config, topic_names)
    return [r for name in topic_names for part in found[name].values() for r in part]


def test_debezium_input_into_a_kafka_topic_byte_for_byte_a_source_transaction_at_a_time(
    clusters, captured_db, services, unique
):
    db = captured_db
    sql_bank.create(db.uri, ACCOUNTS)
    db.register(heartbeat_ms=500)
    db.wait_running()
    target = unique("cdc-ledger")
    feed = _start_feed(services, clusters, db, "", f"kafka://{clusters.b.alias}/{target}")
    workload = sql_bank.Transfers(db.uri, ACCOUNTS, sessions=3, total=300).start()
    workload.join(120)
    assert not workload.errors and workload.done == 300
    expected = ACCOUNTS + 3 * 300  # snapshot rows, then debit, credit and ledger row each
    # The sink makes the target topic with its first write, which may come after the
    # workload ends: wait for the topic and the records together.
    arrived = read_many(clusters.b.config, [target], expect=expected, timeout_s=180)
    assert target in arrived, f"nothing reached {target}\n{feed.logs()}"
    time.sleep(3)  # anything more would be a duplicate: give it a chance to show
    records = _read_all(clusters.b.config, [target])
    assert len(records) == expected, f"{len(records)} of {expected} on the target\n{feed.logs()}"
    # Byte for byte: the same keys and values as Debezium's topics hold.
    source = _read_all(
        clusters.a.config, [f"{db.prefix}.public.accounts", f"{db.prefix}.public.transfers"]
    )
    assert sorted((r.key, r.value) for r in records) == sorted((r.key, r.value) for r in source)
    # Debezium's own headers travel too; the connector adds no context headers
    # (extended.headers.enabled=false), which every hop would carry and parse.
    assert sorted(r.user_headers for r in records) == sorted(r.user_headers for r in source)
    assert not any(name.startswith("__debezium.context") for r in source for name, _ in r.headers)
    assert not any(r.header("crossfeed-schema") for r in records)
    # In between, the schemas travelled by reference: each staged change holds the payload
    # alone and names its schema, which is in the feed's schemas topic once per table.
    changes = [
        r
        for r in _read_all(clusters.b.config, [f"_crossfeed.{feed.name}.changes"])
        if r.header("crossfeed-type") is None
    ]
    stored = {
        r.key: r.value for r in _read_all(clusters.b.config, [f"_crossfeed.{feed.name}.schemas"])
    }
    assert len(changes) == expected and len(stored) == 2
    assert all(r.header("crossfeed-schema") in stored for r in changes)
    assert not any(r.value.startswith(b'{"schema":') for r in changes)
    # A source transaction at a time, in commit order: each transaction's records are
    # contiguous and complete, and commit_ts grows from one to the next.
    runs: list[tuple[str, int, int]] = []  # (txn id, count, commit_ts)
    seen: dict[str, int] = {}
    for r in records:
        txn = (r.header("crossfeed-txn") or b"").decode()
        ts = int(r.header("crossfeed-commit-ts") or b"0")
        if not txn:
            continue  # a snapshot row: a transaction of its own
        txn_id, _, count = txn.split("/")
        if not runs or runs[-1][0] != txn_id:
            assert txn_id not in seen, f"transaction {txn_id} is split on the target"
            runs.append((txn_id, int(count), ts))
        seen[txn_id] = seen.get(txn_id, 0) + 1
    assert len(runs) == 300
    assert all(seen[txn_id] == count == 3 for txn_id, count, _ in runs)
    stamps = [ts for _, _, ts in runs]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    feed.assert_running()


@pytest.mark.slow
def test_a_million_row_source_transaction_in_bounded_memory(
    clusters, captured_db, pg_schema, services
):
    """make slow: one source transaction of 1,000,000 rows arrives whole, and no process
    holds it (the Debezium reader rewinds, the sorter spills segments, the sink writes under a
    savepoint)."""
    db = captured_db
    with psycopg.connect(db.uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE bulk (id integer PRIMARY KEY, payload text NOT NULL)")
    db.register(heartbeat_ms=500)
    db.wait_running()
    feed = _start_feed(services, clusters, db, pg_schema)
    peaks = PeakRss({p.instance: p.pid for p in feed.processes if p.pid})
    peaks.start()
    counts = RowCounts(clusters.postgres_uri, pg_schema, "bulk")
    counts.start()
    try:
        with psycopg.connect(db.uri, autocommit=True) as conn:
            conn.execute(
                "INSERT INTO bulk SELECT g, repeat('x', 100) FROM generate_series(1, 1000000) g"
            )
        deadline = time.monotonic() + 1500
        while 1_000_000 not in counts.seen and time.monotonic() < deadline:
            time.sleep(2)
    finally:
        peak = peaks.finish()
        seen = counts.stop()
    print("peak RSS (MiB): " + ", ".join(f"{k} {v:.0f}" for k, v in peak.items()))
    assert 1_000_000 in seen, f"the transaction did not arrive: {sorted(seen)}\n{feed.logs()}"
    assert seen <= {0, 1_000_000}, f"the transaction was seen torn: {sorted(seen)[:5]}"
    puller = next(v for k, v in peak.items() if k.startswith("puller"))
    assert puller < 1024, f"the puller held {puller:.0f} MiB for one transaction"
    feed.assert_running()
