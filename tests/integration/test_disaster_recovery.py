"""Losing dc-a under an ordered feed of a captured database into PostgreSQL
(docs/disaster-recovery.md): ``crossfeed failover`` fences the target, says what it holds
and what was lost, and the numbers are checked against the source once it is back.

Real parts throughout: the source PostgreSQL with the SQL bank workload, Debezium on
Kafka Connect, dc-a's broker (kill -9), the puller, the Spark sorter and the sink (one of
them paused across the failover: a late sink), the target PostgreSQL. The failover routes
run in a small app of the test's own, the CLI talks to them (as in test_failover.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from crossfeed.cli.main import app as cli
from crossfeed.local import postgres
from crossfeed.services.coordinator.failover import FailoverHooks, make_router
from crossfeed.services.coordinator.rest_server import RestServer
from crossfeed.wire import debezium
from crossfeed.workload import sql_bank
from tests.support.cdc import CapturedDatabase
from tests.support.postgres import drop_schema_after_restarts
from tests.support.verify import read_many
from tests.support.wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.e2e]

ACCOUNTS = 40
SETTINGS = {"puller": {"resolved_interval_ms": 100}, "sorter": {"trigger_interval_ms": 200}}


@pytest.fixture
def pg_schema(clusters: Any, unique: Any) -> Iterator[str]:
    schema = unique("dr").replace("-", "_").replace(".", "_").lower()[:60]
    yield schema
    drop_schema_after_restarts(clusters.postgres_uri, schema)


@pytest.fixture
def routes(clusters: Any) -> Iterator[str]:
    """The coordinator's failover routes, in an app of the test's own."""
    app = FastAPI()
    app.include_router(make_router(FailoverHooks(clusters.settings())))
    server = RestServer(app, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def failover(feed: Any, url: str) -> Any:
    """``crossfeed failover --json`` of a feed-file feed; its report."""
    result = CliRunner().invoke(
        cli,
        [
            *("--config", str(feed.config_file), "failover", "--feed", feed.name),
            *("--feed-file", str(feed.feed_file), "--server", url, "--json"),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def transfer_ids(uri: str, schema: str) -> set[int]:
    """The ledger's ids (none while the table is not there yet)."""
    with psycopg.connect(uri, autocommit=True) as conn:
        try:
            rows = conn.execute(f'SELECT id FROM "{schema}".transfers').fetchall()
        except psycopg.errors.UndefinedTable:
            return set()
        return {i for (i,) in rows}


def consistent_balances(uri: str, schema: str) -> dict[int, tuple[int, int]]:
    """Accounts whose balance is not the opening balance plus the ledger's transfers:
    (balance, expected) by id. Empty when the state is one of whole transfers."""
    with psycopg.connect(uri, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT a.id, a.balance, {sql_bank.OPENING_BALANCE} "
            f'+ coalesce((SELECT sum(amount) FROM "{schema}".transfers WHERE dst = a.id), 0) '
            f'- coalesce((SELECT sum(amount) FROM "{schema}".transfers WHERE src = a.id), 0) '
            f'FROM "{schema}".accounts a'
        ).fetchall()
    return {i: (b, int(e)) for i, b, e in rows if b != e}


def ends_after(clusters: Any, prefix: str, lsn: int) -> int:
    """Distinct transactions in the transaction topic committed after commit LSN ``lsn``
    (what Debezium has delivered; the test waits on it, it does not check with it)."""
    topic = debezium.transaction_topic(prefix)
    records = read_many(clusters.a.config, [topic], isolation="read_uncommitted")[topic]
    ids = set()
    for part in records.values():
        for record in part:
            end = debezium.txn_record(record.value)
            if end is not None and end.lsn > lsn:
                ids.add(end.txn_id)
    return len(ids)


def test_failover_of_a_captured_database_reports_what_the_target_holds_and_fences_a_late_sink(
    clusters, captured_db: CapturedDatabase, pg_schema, services, routes
):
    db = captured_db
    target = clusters.postgres_uri
    sql_bank.create(db.uri, ACCOUNTS)
    db.register(heartbeat_ms=500)
    db.wait_running()
    feed = services.start_feed(
        "dr-bank",
        clusters,
        [db.topics],
        mode="ordered",
        sink_uri=f"{target}?schema={pg_schema}",
        sorters=1,
        config={"input": "debezium"},
        settings=SETTINGS,
        timeout=120,
    )
    sink = feed.sinks[0]
    source = postgres.source()
    workload = sql_bank.Transfers(db.uri, ACCOUNTS, sessions=4, rate=80).start()
    try:
        wait_for("100 transfers applied", lambda: len(transfer_ids(target, pg_schema)) >= 100, 180)
        sink.pause()  # a late sink: frozen mid-stream, its session open on the target
        time.sleep(3)  # what it has not applied crosses to dc-b meanwhile
        clusters.stop("dc-a", hard=True)  # kill -9 of dc-a's broker
        time.sleep(1.5)  # the source commits what never reaches Kafka
        source.stop()
        workload.stop.set()
        workload.join(30)
        assert workload.done > 200

        lost_dc = failover(feed, routes)
        feed.pullers[0].kill()  # the operator stops what still runs (the report says so)
        feed.sorters[0].kill()
        held = transfer_ids(target, pg_schema)
        rpo = lost_dc["rpo"]
        assert not lost_dc["source_reachable"] and not rpo["exact"]
        assert "at least" in rpo["text"] and rpo["transactions"] > 0
        assert lost_dc["sinks_ended"] == 1 and lost_dc["epoch"] == 1
        assert debezium_txn(lost_dc["last_txn"]) and lost_dc["consistency_ts_us"] > 0

        sink.resume()  # its session was ended: it comes back to a fenced target
        wait_for("the late sink fenced", lambda: (sink.status() or {}).get("state") == "fenced")
        time.sleep(2)
        assert transfer_ids(target, pg_schema) == held, "a fenced sink applied something"
        assert not consistent_balances(target, pg_schema), "the target holds a torn state"
        with psycopg.connect(target, autocommit=True) as conn:
            kept = conn.execute(
                f"SELECT rpo_transactions, rpo_exact, consistency_ts, last_txn, report "
                f'FROM "{pg_schema}".crossfeed_failover WHERE feed = %s AND epoch = 1',
                (feed.name,),
            ).fetchone()
        assert kept is not None
        assert kept[:4] == (
            rpo["transactions"],
            False,
            lost_dc["consistency_ts_us"],
            lost_dc["last_txn"],
        )
        assert kept[4]["rpo"] == rpo

        # dc-a back: count on the source what the target never got.
        source.start()
        wait_for("the source database answers", source.answers)
        committed = transfer_ids(db.uri, "public")
        assert held <= committed
        columns = sql_bank.TRANSFER_COLUMNS
        mine = [r for r in sql_bank.rows(db.uri, "public", "transfers", columns) if r[0] in held]
        assert mine == sql_bank.rows(target, pg_schema, "transfers", columns)
        missing = len(committed - held)  # each transfer is one source transaction
        assert rpo["transactions"] <= missing, (rpo, missing)

        # With dc-a's Kafka readable the count is exact: once Debezium has delivered
        # everything the source committed, a failover run again says how many.
        clusters.start("dc-a")
        lsn = debezium_txn(lost_dc["last_txn"])
        wait_for("Debezium caught up", lambda: ends_after(clusters, db.prefix, lsn) >= missing, 180)
        again = failover(feed, routes)
        assert again["source_reachable"] and again["rpo"]["exact"], again
        assert again["rpo"]["transactions"] == missing, (again["rpo"], missing)
        assert again["consistency_ts_us"] == lost_dc["consistency_ts_us"]
        assert again["last_txn"] == lost_dc["last_txn"] and again["epoch"] == 2
        assert again["rpo"]["span_s"] > 0
    finally:
        workload.stop.set()
        if sink.paused:
            sink.resume()
        if not source.running():
            source.start()
            wait_for("the source database answers", source.answers)
        clusters.start("dc-a")
    assert transfer_ids(target, pg_schema) == held


def debezium_txn(txn: str) -> int:
    """The commit LSN of a Debezium transaction's id (``<xid>.<lsn>``); 0 if not one."""
    xid, _, lsn = txn.partition(".")
    return int(lsn) if xid.isdigit() and lsn.isdigit() else 0
