"""Losing dc-a under an ordered feed of a captured database into PostgreSQL
(docs/disaster-recovery.md): ``crossfeed failover`` fences the target, says what it holds
and what was lost, and the numbers are checked against the source once it is back.

Real parts throughout: the source PostgreSQL with the SQL bank workload, Debezium on
Kafka Connect, dc-a's broker (kill -9), the puller, the Spark sorter and the sink (one of
them paused across the failover: a late sink), the target PostgreSQL. The failover routes
run in a small app of the test's own, the CLI talks to them (as in test_failover.py).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from crossfeed.cdc import connect_api, connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.cli.main import app as cli
from crossfeed.feeds import load_feed_file
from crossfeed.kafka import clients
from crossfeed.local import postgres, stack
from crossfeed.services.coordinator.failover import FailoverHooks, make_router
from crossfeed.services.coordinator.rest_server import RestServer
from crossfeed.wire import debezium
from crossfeed.workload import sql_bank
from crossfeed.workload.run import run_bank
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


@pytest.fixture
def routes_for(clusters: Any) -> Iterator[Callable[[Any], str]]:
    """The failover routes of a coordinator that runs the given feed (its spec stored)."""
    servers: list[RestServer] = []

    def start(feed: Any) -> str:
        spec = load_feed_file(str(feed.feed_file))
        hooks = FailoverHooks(
            clusters.settings(), find_feed=lambda name: spec if name == spec.name else None
        )
        app = FastAPI()
        app.include_router(make_router(hooks))
        servers.append(RestServer(app, "127.0.0.1", 0).start())
        return f"http://127.0.0.1:{servers[-1].port}"

    try:
        yield start
    finally:
        for server in servers:
            server.stop()


def captured_feed(
    services: Any, clusters: Any, db: CapturedDatabase, name: str, sink_uri: str
) -> Any:
    """The bank's tables on the captured database, its connector, and a feed of them
    (puller, sorter, sink) into ``sink_uri``."""
    sql_bank.create(db.uri, ACCOUNTS)
    db.register(heartbeat_ms=500)
    db.wait_running()
    return services.start_feed(
        name,
        clusters,
        [db.topics],
        mode="ordered",
        sink_uri=sink_uri,
        sorters=1,
        config={"input": "debezium"},
        settings=SETTINGS,
        timeout=120,
    )


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


def regain(clusters: Any, alias: str) -> None:
    """Start a killed cluster again. On a busy machine its JVM can take minutes, and the
    broker is refused while the controller still holds the killed one's registration:
    up to five more minutes."""
    try:
        clusters.start(alias)
    except stack.StackError:
        config = clusters.by_alias(alias).config
        wait_for(f"{alias} answers", lambda: clients.cluster_id(config, 2.0), 300)


def recaptured(db: CapturedDatabase, clusters: Any, lsn: int, missing: int) -> bool:
    """Has Debezium delivered every transaction after ``lsn``? Its task is restarted when it
    failed while dc-a or the source was away (a producer or a connection that gave up)."""
    with contextlib.suppress(ConnectError):
        tasks = connector.status(db.connect_url, db.name).get("tasks", [])
        if not tasks or any(t.get("state") == "FAILED" for t in tasks):
            restart = f"/connectors/{db.name}/restart?includeTasks=true&onlyFailed=true"
            connect_api.request(db.connect_url, "POST", restart)
    return ends_after(clusters, db.prefix, lsn) >= missing


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
    feed = captured_feed(services, clusters, db, "dr-bank", f"{target}?schema={pg_schema}")
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
        regain(clusters, "dc-a")
        lsn = debezium_txn(lost_dc["last_txn"])
        wait_for("Debezium caught up", lambda: recaptured(db, clusters, lsn, missing), 240)
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
        regain(clusters, "dc-a")
    assert transfer_ids(target, pg_schema) == held


def debezium_txn(txn: str) -> int:
    """The commit LSN of a Debezium transaction's id (``<xid>.<lsn>``); 0 if not one."""
    xid, _, lsn = txn.partition(".")
    return int(lsn) if xid.isdigit() and lsn.isdigit() else 0


def topic_transfers(clusters: Any, topic: str) -> dict[int, str]:
    """The ledger rows a Kafka target holds (Debezium's records, byte for byte): transfer id
    -> the crossfeed-txn of the source transaction that carried it."""
    found = read_many(clusters.b.config, [topic], expect=0, timeout_s=30).get(topic, {})
    out = {}
    for part in found.values():
        for record in part:
            payload = debezium.payload_of(record.value) if record.value else {}
            if payload.get("op") == "c" and payload["source"]["table"] == "transfers":
                txn = dict(record.headers).get("crossfeed-txn") or b""
                out[int(payload["after"]["id"])] = txn.decode().split("/")[0]
    return out


def test_failover_of_a_feed_into_a_kafka_topic_reports_the_last_transaction_it_holds(
    clusters, captured_db: CapturedDatabase, services, routes, unique
):
    db = captured_db
    topic = unique("dr-ledger")
    feed = captured_feed(services, clusters, db, "dr-topic", f"kafka://{clusters.b.alias}/{topic}")
    source = postgres.source()
    workload = sql_bank.Transfers(db.uri, ACCOUNTS, sessions=4, rate=80).start()
    try:
        wait_for(
            "100 transfers in the topic", lambda: len(topic_transfers(clusters, topic)) >= 100, 180
        )
        feed.sinks[0].kill()  # the target stops moving; what follows waits on dc-b
        time.sleep(2)
        feed.pullers[0].kill()  # the pipeline from dc-a is cut; dc-a's Kafka still answers
        time.sleep(1.5)
        source.stop()
        workload.stop.set()
        workload.join(30)
        feed.sorters[0].kill()
        source.start()  # count on the source what the topic never got
        wait_for("the source database answers", source.answers)
        held = topic_transfers(clusters, topic)
        committed = transfer_ids(db.uri, "public")
        assert set(held) <= committed
        missing = len(committed - set(held))
        assert missing > 0
        last = max(held.values(), key=debezium_txn)
        lsn = debezium_txn(last)
        wait_for("Debezium caught up", lambda: recaptured(db, clusters, lsn, missing), 120)

        report = failover(feed, routes)
        assert report["source_reachable"] and report["rpo"]["exact"], report
        assert report["last_txn"] == last
        assert report["rpo"]["transactions"] == missing, (report["rpo"], missing)
        assert report["rpo"]["span_s"] > 0 and report["consistency_ts_us"] > 0
        assert report["epoch"] == 0 and any("not fenced" in n for n in report["notes"])

        # dc-a lost as well: what crossed to dc-b is a lower bound.
        clusters.stop("dc-a", hard=True)
        lower = failover(feed, routes)
        assert not lower["source_reachable"] and not lower["rpo"]["exact"]
        assert lower["last_txn"] == last
        assert 0 < lower["rpo"]["transactions"] <= missing, (lower["rpo"], missing)
    finally:
        workload.stop.set()
        if not source.running():
            source.start()
            wait_for("the source database answers", source.answers)
        regain(clusters, "dc-a")


def applied_transfers(uri: str, schema: str, feed: str) -> int:
    """The bank's transaction number of the last one applied (its txn ids are
    ``<run>-<n>``, the opening 0); -1 before any."""
    with psycopg.connect(uri, autocommit=True) as conn:
        try:
            row = conn.execute(
                f'SELECT txn FROM "{schema}".crossfeed_position WHERE feed = %s', (feed,)
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return -1
    return int(row[0].rsplit("-", 1)[1]) if row and row[0] else -1


def test_failover_of_a_change_producer_feed_counts_from_its_source_topics_or_what_crossed(
    clusters, services, topic_factory, pg_schema, routes_for: Any
):
    partitions = 4
    bank_topic = topic_factory(clusters.a, partitions=partitions)
    target = clusters.postgres_uri
    feed = services.start_feed(
        "dr-producer",
        clusters,
        [bank_topic],
        mode="ordered",
        sink_uri=f"{target}?schema={pg_schema}",
        sorters=1,
        config={"staging.partitions": 2},
        settings=SETTINGS,
        timeout=120,
    )
    url = routes_for(feed)
    stop = threading.Event()
    written: dict[str, Any] = {}

    def workload() -> None:
        written["summary"], written["bank"] = run_bank(
            clusters.a.config, bank_topic, accounts=50, partitions=partitions, rate=100,
            stop=stop.is_set,
        )  # fmt: skip

    writer = threading.Thread(target=workload, daemon=True)
    writer.start()
    try:
        wait_for(
            "100 transfers applied",
            lambda: applied_transfers(target, pg_schema, feed.name) >= 100,
            180,
        )
        feed.sinks[0].kill()  # the target stops; what follows waits on dc-b
        time.sleep(2)
        feed.pullers[0].kill()  # cut from dc-a; what follows stays there
        time.sleep(1.5)
        stop.set()
        writer.join(30)
        feed.sorters[0].kill()
        summary = written["summary"]
        applied = applied_transfers(target, pg_schema, feed.name)
        lost = summary.transactions - (applied + 1)  # the opening is transaction 0
        assert lost > 100, (summary, applied)

        exact = failover(feed, url)
        assert exact["source_reachable"] and exact["rpo"]["exact"], exact
        assert exact["last_txn"] == f"{summary.run_id}-{applied}"
        assert exact["rpo"]["transactions"] == lost, (exact["rpo"], lost)
        assert exact["rpo"]["last_lost_us"] == summary.last_commit_ts

        clusters.stop("dc-a", hard=True)
        crossed = failover(feed, url)
        assert not crossed["source_reachable"] and not crossed["rpo"]["exact"]
        # what crossed before the puller was killed, not what dc-a got after it
        assert 0 < crossed["rpo"]["transactions"] < lost, (crossed["rpo"], lost)
        kept = httpx.get(f"{url}/v1/failover/{feed.name}", timeout=10).json()
        assert (kept["epoch"], kept["rpo"]) == (2, crossed["rpo"])
    finally:
        stop.set()
        regain(clusters, "dc-a")
