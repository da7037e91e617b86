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
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from crossfeed.cdc import captured, connect_api, connector
from crossfeed.cdc.captured import CapturedDatabase
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.core.switchover import reverse_name
from crossfeed.dr import database, switchover
from crossfeed.dr.switchover import SwitchoverError, SwitchoverRequest
from crossfeed.feeds import FeedSpec, load_feed_file, parse_feed
from crossfeed.workload import sql_bank
from tests.support.postgres import drop_schema_after_restarts
from tests.support.verify import read_many
from tests.support.wait import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.e2e]

ACCOUNTS = 30
SETTINGS = {"puller": {"resolved_interval_ms": 100}, "sorter": {"trigger_interval_ms": 200}}
WRITE_ERRORS = (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction)


class Bank(threading.Thread):
    """An application: transfers in one session against the primary of the moment. A
    refused write (the freeze) sends it to wait for ``moved``, then to ``new_uri``. It keeps
    the id of each transfer it saw commit, by database."""

    def __init__(self, uri: str, schema: str) -> None:
        super().__init__(daemon=True)
        self.uri, self.schema = uri, schema
        self.moved = threading.Event()
        self.stop = threading.Event()
        self.new: tuple[str, str] | None = None
        self.committed: dict[str, list[int]] = {"source": [], "target": []}
        self.refused = 0
        self.side = "source"

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                with psycopg.connect(self.uri, autocommit=True) as conn:
                    while not self.stop.is_set():
                        n += 1
                        self._transfer(conn, n)
                        time.sleep(0.01)
            except WRITE_ERRORS:
                self.refused += 1
                if self.side == "source":
                    self.moved.wait()
                    assert self.new is not None
                    self.uri, self.schema = self.new
                    self.side = "target"
                else:
                    time.sleep(0.2)

    def _transfer(self, conn: psycopg.Connection[Any], n: int) -> None:
        src, dst = 1 + n % ACCOUNTS, 1 + (n * 7 + 3) % ACCOUNTS
        if src == dst:
            dst = 1 + dst % ACCOUNTS
        with conn.transaction():
            for account, delta in sorted([(src, -5), (dst, 5)]):
                conn.execute(
                    f'UPDATE "{self.schema}".accounts SET balance = balance + %s WHERE id = %s',
                    (delta, account),
                )
            row = conn.execute(
                f'INSERT INTO "{self.schema}".transfers (src, dst, amount, memo, ref) '
                "VALUES (%s, %s, 5, '{}', gen_random_uuid()) RETURNING id",
                (src, dst),
            ).fetchone()
        assert row is not None
        self.committed[self.side].append(int(row[0]))


class FileFeeds:
    """The switchover's feeds: those this test started from feed files."""

    def __init__(self, services: Any, clusters: Any) -> None:
        self.services, self.clusters = services, clusters
        self.running: dict[str, Any] = {}

    def add(self, feed: Any) -> None:
        self.running[feed.name] = feed

    def spec(self, name: str) -> FeedSpec | None:
        feed = self.running.get(name)
        return None if feed is None else load_feed_file(str(feed.feed_file))

    def stop(self, name: str) -> None:
        self.running[name].stop_all()

    def put_feed(self, body: dict[str, Any]) -> str:
        spec = parse_feed(body, "the reverse feed")
        feed = self.services.start_feed(
            spec.name,
            self.clusters,
            spec.topics,
            source=spec.source,
            target=spec.source,
            mode="ordered",
            sink_uri=spec.sink_uri,
            sorters=1,
            config=spec.config.model_dump(by_alias=True, exclude_none=True),
            settings=SETTINGS,
            timeout=150,
        )
        self.add(feed)
        self.reverse = feed
        return "created"


@pytest.fixture
def source_db(both_sides: tuple[str, str]) -> Iterator[CapturedDatabase]:
    db = captured.create(f"sw_{uuid.uuid4().hex[:10]}", both_sides[0])
    try:
        yield db
    finally:
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
    with psycopg.connect(clusters.postgres_uri, autocommit=True) as conn:
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


def test_switchover_under_a_running_workload_loses_nothing_and_reverses_without_a_snapshot(
    clusters, both_sides, services, source_db, target_schema
):
    connect_a, connect_b = both_sides
    db, target = source_db, clusters.postgres_uri
    # The same tables on both sides (with their sequences), as a team sets them up.
    sql_bank.create(db.uri, ACCOUNTS)
    sql_bank.create(target, ACCOUNTS, target_schema)
    db.register(heartbeat_ms=500)
    db.wait_running()
    feeds = FileFeeds(services, clusters)
    forward = services.start_feed(
        "sw-bank",
        clusters,
        [rf"{db.prefix}\.public\.(accounts|transfers)"],
        mode="ordered",
        sink_uri=f"{target}?schema={target_schema}",
        sorters=1,
        config={"input": "debezium", "debezium.topic.prefix": db.prefix},
        settings=SETTINGS,
        timeout=150,
    )
    feeds.add(forward)
    bank = Bank(db.uri, "public")
    bank.start()
    wait_for("200 transfers applied", lambda: len(ids(target, target_schema)) >= 200, 240)

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
    bank.new = (target, target_schema)
    bank.moved.set()  # the application moves to the new primary once it is told

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
    wait_for("100 transfers on the new primary", lambda: len(bank.committed["target"]) >= 100, 120)
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
