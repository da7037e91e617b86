"""PostgreSQL -> Debezium on Kafka Connect -> crossfeed (puller, Spark sorter, sink) ->
PostgreSQL: the SQL bank workload (tests/support + crossfeed/workload/sql_bank.py) in
real multi-statement transactions over two tables with foreign keys, from concurrent
sessions, while a sampler reads the target.

What every test checks: the sampler never saw a torn total or a ledger row without its
accounts, and at the end both tables on the target equal the source's, row for row (so
nothing was lost or applied twice).
"""

from __future__ import annotations

import time
from typing import Any

import psycopg
import pytest

from crossfeed.local import stack
from crossfeed.workload import sql_bank
from tests.support.cdc import CapturedDatabase
from tests.support.postgres import drop_schema_after_restarts

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
    tables = {"accounts": sql_bank.ACCOUNT_COLUMNS, "transfers": sql_bank.TRANSFER_COLUMNS}
    differs = ""
    while time.monotonic() < deadline:
        differs = ""
        for table, columns in tables.items():
            source = sql_bank.rows(db.uri, "public", table, columns)
            target = sql_bank.rows(target_uri, schema, table, columns)
            if source != target:
                missing = len(set(source) - set(target))
                extra = len(set(target) - set(source))
                differs = (
                    f"{table}: {len(source)} rows on the source, {len(target)} on the target "
                    f"({missing} missing or different, {extra} not on the source)"
                )
                break
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
