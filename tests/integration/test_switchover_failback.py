"""A planned switchover of a captured database's feed under a running workload
(docs/disaster-recovery.md): the source is frozen, the feed drains, the tables are
compared, and a reverse feed — Debezium on dc-b's side, no snapshot — carries the new
primary's writes back. Nothing lost, nothing applied twice, writes refused for the time
the report states.

Real parts throughout: both PostgreSQL servers captured (``local up --active-active``),
Debezium on both Connect workers, the puller, the Spark sorter and the sink of each
direction. The feeds run from feed files (the test's ``Feeds`` stops and starts them, as
the coordinator pauses and creates them).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from fastapi import FastAPI
from typer.testing import CliRunner

from crossfeed.cdc import connect_api, connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.cli.main import app as cli
from crossfeed.client.rest import CoordinatorClient
from crossfeed.core.switchover import reverse_name
from crossfeed.dr import database, failback, switchover
from crossfeed.dr.failback import FailbackRequest
from crossfeed.dr.switchover import SwitchoverError, SwitchoverRequest
from crossfeed.feeds import FeedSpec, load_feed_file, parse_feed
from crossfeed.local import captured, postgres
from crossfeed.local.captured import CapturedDatabase
from crossfeed.services.coordinator.failover import FailoverHooks, make_router
from crossfeed.services.coordinator.rest_server import RestServer
from crossfeed.workload import sql_bank
from crossfeed.workload.sql_bank import FollowingTransfers
from tests.integration.test_coordinator_process import TOKEN, coordinator_group, remove_feed_quietly
from tests.support.postgres import drop_schema_after_restarts
from tests.support.verify import read_many
from tests.support.wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.e2e]

ACCOUNTS = 30
SETTINGS = {"puller": {"resolved_interval_ms": 100}, "sorter": {"trigger_interval_ms": 200}}


class FileFeeds:
    """The switchover's feeds: those this test started from feed files."""

    def __init__(self, services: Any, clusters: Any) -> None:
        self.services, self.clusters = services, clusters
        self.running: dict[str, Any] = {}
        self.named: dict[str, str] = {}  # a feed's name as asked -> as started (suffixed)

    def add(self, feed: Any) -> None:
        self.running[feed.name] = feed

    def spec(self, name: str) -> FeedSpec | None:
        feed = self.running.get(self.named.get(name, name))
        return None if feed is None else load_feed_file(str(feed.feed_file))

    def retire(self, name: str) -> None:
        self.running[name].stop_all()

    def put_feed(self, body: dict[str, Any]) -> str:
        spec = parse_feed(body, "the reverse feed")
        feed = self.services.start_feed(
            spec.name,
            self.clusters,
            spec.topics,
            source=spec.source,
            target="dc-b",  # the control cluster, where a database feed stages
            mode="ordered",
            sink_uri=spec.sink_uri,
            sorters=1,
            config=spec.config.model_dump(by_alias=True, exclude_none=True),
            settings=SETTINGS,
            timeout=150,
        )
        self.add(feed)
        self.named[spec.name] = feed.name
        self.reverse = feed
        return "created"


@pytest.fixture
def source_db(both_sides: tuple[str, str]) -> Iterator[CapturedDatabase]:
    """A database on the source server, captured; afterwards, with every connector made for
    it (a switch back makes a new one) and every slot on it."""
    db = captured.create(f"sw_{uuid.uuid4().hex[:10]}", both_sides[0])
    try:
        yield db
    finally:
        with contextlib.suppress(ConnectError):
            for name in connector.names(both_sides[0]):
                config = connect_api.request(both_sides[0], "GET", f"/connectors/{name}/config")
                if config.get("database.dbname") == db.name and name != db.name:
                    connector.remove(both_sides[0], name)
        with psycopg.connect(db.admin_uri, autocommit=True) as conn:
            slots = conn.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (db.name,)
            ).fetchall()
            captured.drop_slots(conn, [str(s) for (s,) in slots], timeout_s=60)
        captured.drop(db)


@pytest.fixture
def target_schema(clusters: Any, both_sides: tuple[str, str]) -> Iterator[str]:
    """A schema of the test's own on the target; afterwards, with any reverse connector
    made for it and its slot and publication (a slot left behind keeps the server from
    starting with wal_level=replica)."""
    schema = f"sw_{uuid.uuid4().hex[:10]}"
    yield schema
    connect_b = both_sides[1]
    with contextlib.suppress(ConnectError):
        for name in connector.names(connect_b):
            config = connect_api.request(connect_b, "GET", f"/connectors/{name}/config")
            if f"{schema}\\." in str(config.get("table.include.list", "")):
                connector.remove(connect_b, name)
    with database.connect(clusters.postgres_uri) as conn:
        database.thaw(conn)  # a switch back leaves the test's shared target read-only
        names = conn.execute(
            "SELECT pubname FROM pg_publication_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        for name in {str(n) for (n,) in names}:
            database.drop_capture(conn, name, wait_s=60)
    drop_schema_after_restarts(clusters.postgres_uri, schema)


def ids(uri: str, schema: str) -> list[int]:
    with psycopg.connect(uri, autocommit=True) as conn:
        return [i for (i,) in conn.execute(f'SELECT id FROM "{schema}".transfers ORDER BY id')]


def balances(uri: str, schema: str) -> list[tuple[int, int]]:
    with psycopg.connect(uri, autocommit=True) as conn:
        return list(conn.execute(f'SELECT id, balance FROM "{schema}".accounts ORDER BY id'))


def read_only(uri: str) -> bool:
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute("SHOW default_transaction_read_only").fetchone()
        return bool(row and row[0] == "on")


def forward_feed(
    services: Any, clusters: Any, db: CapturedDatabase, target: str, schema: str
) -> tuple[Any, FileFeeds]:
    """The bank's tables on both sides (with their sequences, as a team sets them up), the
    source's connector, and a feed from it into the target schema."""
    sql_bank.create(db.uri, ACCOUNTS)
    sql_bank.create(target, ACCOUNTS, schema)
    db.register(heartbeat_ms=500)
    db.wait_running()
    feeds = FileFeeds(services, clusters)
    forward = services.start_feed(
        "sw-bank",
        clusters,
        [rf"{db.prefix}\.public\.(accounts|transfers)"],
        mode="ordered",
        sink_uri=f"{target}?schema={schema}",
        sorters=1,
        config={"input": "debezium", "debezium.topic.prefix": db.prefix},
        settings=SETTINGS,
        timeout=150,
    )
    feeds.add(forward)
    return forward, feeds


def bank_under_way(
    services: Any, clusters: Any, db: CapturedDatabase, schema: str, applied: int
) -> tuple[Any, FileFeeds, FollowingTransfers]:
    """The forward feed, and the application writing transfers at the source until the
    target holds ``applied`` of them."""
    target = clusters.postgres_uri
    forward, feeds = forward_feed(services, clusters, db, target, schema)
    bank = FollowingTransfers(db.uri, "public", "source", ACCOUNTS)
    bank.start()
    wait_for(f"{applied} transfers applied", lambda: len(ids(target, schema)) >= applied, 240)
    return forward, feeds, bank


def test_switchover_under_a_running_workload_loses_nothing_and_reverses_without_a_snapshot(
    clusters, both_sides, services, source_db, target_schema
):
    connect_a, connect_b = both_sides
    db, target = source_db, clusters.postgres_uri
    forward, feeds, bank = bank_under_way(services, clusters, db, target_schema, 200)

    request = SwitchoverRequest(
        feed=forward.name,
        source_database=db.uri,
        source_connect=connect_a,
        reverse_connect=connect_b,
        reverse_cluster="dc-b",
    )
    lines: list[str] = []
    report = switchover.run(request, feeds, lambda spec: "dc-b", lines.append)
    print(report.model_dump_json(indent=1), *lines, sep="\n")
    bank.move(target, target_schema, "target")  # the application moves once it is told

    # RPO 0: everything the application saw commit on the source is on the target, once.
    on_source = bank.committed["source"]
    held = ids(target, target_schema)
    assert on_source and set(on_source) <= set(held)
    assert len(held) == len(set(held))
    assert report.rpo_transactions == 0 and report.reverse_feed == reverse_name(forward.name)
    assert {t.table for t in report.tables} == {"accounts", "transfers"}
    assert report.sessions_ended >= 1 and bank.refused >= 1
    assert 0 < report.writes_refused_s < report.took_s
    assert any(s.startswith("transfers.id=") for s in report.sequences)
    assert read_only(db.uri), "the old primary must refuse applications' writes"
    assert any("connector" in r for r in report.removed)

    # The application goes on at the new primary; the reverse feed brings it to the source.
    wait_for(
        "100 transfers on the new primary",
        lambda: len(bank.committed.get("target", ())) >= 100,
        120,
    )
    bank.stop.set()
    bank.join(30)
    on_target = bank.committed["target"]
    assert min(on_target) > max(on_source), "the new primary handed out an id used before"
    wait_for(
        "the reverse feed caught up",
        lambda: ids(db.uri, "public") == ids(target, target_schema),
        240,
    )
    assert balances(db.uri, "public") == balances(target, target_schema)
    assert set(ids(db.uri, "public")) == set(on_source) | set(on_target)
    # No snapshot: the reverse connector's events are the new primary's writes alone.
    prefix = report.reverse_connector
    topics = [f"{prefix}.{target_schema}.accounts", f"{prefix}.{target_schema}.transfers"]
    events = [
        json.loads(r.value)["payload"]
        for by_partition in read_many(clusters.b.config, topics).values()
        for part in by_partition.values()
        for r in part
        if r.value
    ]
    assert events and not [e for e in events if e["op"] == "r"], "the reverse feed snapshotted"
    inserted = {e["after"]["id"] for e in events if e["op"] == "c" and "src" in e["after"]}
    assert inserted == set(on_target)

    # A second switchover of the old direction is refused before anything is touched.
    with pytest.raises(SwitchoverError, match=r"already read-only|no publication"):
        switchover.run(request, feeds, lambda spec: "dc-b")


def failover_cli(clusters: Any, feed: Any) -> dict[str, Any]:
    """``crossfeed failover --json`` of a feed-file feed, against the failover routes of a
    coordinator of the test's own; its report."""
    spec = load_feed_file(str(feed.feed_file))
    hooks = FailoverHooks(clusters.settings(), find_feed=lambda n: spec if n == spec.name else None)
    app = FastAPI()
    app.include_router(make_router(hooks))
    server = RestServer(app, "127.0.0.1", 0).start()
    try:
        result = CliRunner().invoke(
            cli,
            [
                *("--config", str(feed.config_file), "failover", "--feed", feed.name),
                *("--feed-file", str(feed.feed_file)),
                *("--server", f"http://127.0.0.1:{server.port}", "--json"),
            ],
            catch_exceptions=False,
        )
    finally:
        server.stop()
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_failback_lists_the_divergent_tail_reseeds_the_old_primary_and_switches_back(
    clusters, both_sides, services, source_db, target_schema
):
    connect_a, connect_b = both_sides
    db, target = source_db, clusters.postgres_uri
    forward, feeds, bank = bank_under_way(services, clusters, db, target_schema, 100)

    # dc-a is cut off: nothing more crosses, while the source still commits (the tail);
    # then the source server goes down too.
    forward.pullers[0].kill()
    time.sleep(3)
    source = postgres.source()
    source.stop()
    lost = failover_cli(clusters, forward)
    forward.stop_all()
    held = set(ids(target, target_schema))
    tail = set(bank.committed["source"]) - held
    assert tail, "the test needs transactions that never reached the target"
    assert any(n.startswith("sequences moved") for n in lost["notes"]), lost["notes"]

    bank.move(target, target_schema, "target")  # the new primary takes the writes
    wait_for("50 transfers on the new primary", lambda: len(bank.committed.get("target", ())) >= 50)
    source.start()  # the old primary is back, with its tail
    wait_for("the old primary answers", source.answers, 120)

    request = FailbackRequest(
        feed=forward.name,
        source_database=db.uri,
        source_connect=connect_a,
        reverse_connect=connect_b,
        reverse_cluster="dc-b",
        source_connector=db.name,
        switch_back=True,  # the test's FileFeeds starts the reverse feed's services
    )
    lines: list[str] = []
    report = failback.run(
        request,
        feeds,
        lambda spec: "dc-b",
        lambda alias: clusters.by_alias(alias).config,
        lines.append,
    )
    print(report.model_dump_json(indent=1), *lines, sep="\n")
    bank.move(db.uri, "public", "source again")  # the original direction is back

    # The tail, exactly: one transaction per transfer the target never got, each listed.
    assert report.divergent_transactions == len(tail)
    with psycopg.connect(db.uri, autocommit=True) as conn:
        listed = conn.execute(
            "SELECT (after->>'id')::bigint, after->>'ref' FROM public.crossfeed_divergent "
            "WHERE tbl = 'public.transfers' AND op = 'c'"
        ).fetchall()
        kept = conn.execute(
            "SELECT count(DISTINCT commit_lsn), count(*) FROM public.crossfeed_divergent"
        ).fetchone()
    assert {i for (i, _ref) in listed} == tail
    assert kept == (len(tail), 3 * len(tail))  # two accounts and the transfer each
    assert report.switchover is not None and report.switchover.rpo_transactions == 0
    assert not read_only(db.uri) and read_only(target)

    # The old primary equals the new one, without its tail; the new forward feed carries
    # what the application writes there now.
    wait_for(
        "20 transfers on the old primary again",
        lambda: len(bank.committed.get("source again", ())) >= 20,
    )
    bank.stop.set()
    bank.join(30)
    wait_for(
        "the new forward feed caught up",
        lambda: ids(db.uri, "public") == ids(target, target_schema),
        240,
    )
    assert balances(db.uri, "public") == balances(target, target_schema)
    final = set(ids(db.uri, "public"))
    with psycopg.connect(db.uri, autocommit=True) as conn:
        refs = {str(r) for (r,) in conn.execute("SELECT ref FROM public.transfers")}
    assert not refs & {ref for (_id, ref) in listed}, "a tail transfer survived the re-seed"
    assert final == held | set(bank.committed["target"]) | set(bank.committed["source again"])


@pytest.fixture(scope="module")
def coordinator(clusters: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from coordinator_group(clusters, tmp_path_factory.mktemp("dr"), 1)


def test_the_commands_refuse_through_the_coordinator_with_every_reason_and_change_nothing(
    clusters, both_sides, coordinator, source_db, target_schema
):
    """``crossfeed switchover`` and ``crossfeed failback`` of a database feed, through a
    real coordinator: a feed that never applied and a source that is not captured are
    refused, one line per reason, and the source stays writable."""
    connect_a, connect_b = both_sides
    db, target = source_db, clusters.postgres_uri
    sql_bank.create(db.uri, ACCOUNTS)
    name = f"dr-{uuid.uuid4().hex[:6]}"
    with CoordinatorClient(coordinator.leader().url, TOKEN) as api:
        api.create_feed(
            {
                "name": name,
                "source": "dc-a",
                "sink-uri": f"{target}?schema={target_schema}",
                "topics": [rf"{db.prefix}\.public\..*"],
                "mode": "ordered",
                "input": "debezium",
            }
        )
    places = [
        *("--source-database", db.uri, "--source-connect", connect_a),
        *("--reverse-connect", connect_b, "--server", coordinator.leader().url),
    ]
    try:
        common = ["--config", str(coordinator.config_file)]
        switched = CliRunner().invoke(
            cli, [*common, "switchover", "--feed", name, *places], terminal_width=400
        )
        failed_back = CliRunner().invoke(
            cli, [*common, "failback", "--feed", name, *places], terminal_width=400
        )
    finally:
        remove_feed_quietly(coordinator, name)
    assert switched.exit_code == 1, switched.output
    assert f"no publication crossfeed_{db.prefix}" in switched.output
    assert f"no table {target_schema}.accounts" not in switched.output  # none published
    assert f"holds no position of feed {name}" in switched.output
    assert failed_back.exit_code == 1, failed_back.output
    assert "was not failed over" in failed_back.output
    assert not read_only(db.uri)
