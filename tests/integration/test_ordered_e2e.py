"""Ordered feeds end to end: the bank workload on dc-a, pullers, the Spark sorter and the
sink as real processes, into a Kafka topic on dc-b and into PostgreSQL.

What every test checks (tests/support/bank.py): the target is in commit order, every
transaction contiguous and complete, nothing missing or duplicated, and the total balance
is the initial total at every transaction boundary — read by a read_committed consumer
(or a PostgreSQL connection) *while the feed runs*, so a torn transfer would show.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from crossfeed.kafka import clients
from crossfeed.local.postgres import Postgres
from crossfeed.workload.run import write_transactions
from tests.support.bank import OrderedChecker, verify_bank
from tests.support.postgres import Sampler, drop_schema_after_restarts
from tests.support.verify import Record

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.e2e]

PARTITIONS = 8
SETTINGS = {
    "puller": {"resolved_interval_ms": 100},
    "sorter": {"trigger_interval_ms": 200},
}


class TargetWatcher(threading.Thread):
    """Reads the ordered Kafka target with read_committed while the feed runs. Every time
    it has read all that is visible (a consume call that returns less than it asked for),
    the last transaction must be whole: a source transaction split over two target
    transactions would show as a torn one here."""

    def __init__(self, config: dict[str, Any], topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = clients.consumer(
            config,
            **{
                "group.id": f"watch-{topic}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            },
        )
        self.topic = topic
        self.checker = OrderedChecker()  # order and whole transactions, live
        self.records: list[Record] = []
        self.torn: list[str] = []
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.consumer.subscribe([self.topic])
            while not self.stopping.is_set():
                batch = self.consumer.consume(5000, 0.2)
                for msg in batch:
                    if msg.error():
                        continue
                    record = Record.from_message(msg)
                    self.checker.add(record)
                    self.records.append(record)
                if batch and len(batch) < 5000 and (torn := self.checker.open_partial()):
                    self.torn.append(torn)
        except BaseException as err:  # surfaced by the test
            self.error = err
        finally:
            self.consumer.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


def _wait_for(what: str, done: Callable[[], bool], timeout: float, describe: Callable[[], str]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.5)
    raise AssertionError(f"{what} within {timeout:.0f}s: {describe()}")


def _moves(what: str, watcher: TargetWatcher, feed: Any, by: int = 2_000) -> None:
    """Until ``by`` more records than now are on the target."""
    seen = len(watcher.records)
    _wait_for(what, lambda: len(watcher.records) > seen + by, 180, feed.logs)


def _all_on_target(
    watcher: TargetWatcher, writer: threading.Thread, written: dict[str, Any], feed: Any
) -> tuple[Any, dict[int, int]]:
    """Once the bank workload is done: until every change it wrote is on the target, then
    a moment more for a duplicate to show. Returns its summary and final balances."""
    writer.join(600)
    assert "result" in written, "the bank workload did not finish"
    summary, balances = written["result"]
    _wait_for(
        f"all {summary.events} changes on the target",
        lambda: len(watcher.records) >= summary.events,
        300,
        lambda: f"{len(watcher.records)} so far; {feed.logs()}",
    )
    time.sleep(3)  # anything beyond would be a duplicate: give it a chance to show
    return summary, balances


def _assert_ledger(
    watcher: TargetWatcher, summary: Any, balances: dict[int, int], feed: Any
) -> None:
    """What every Kafka test here checks of what the watcher read (module docstring)."""
    assert watcher.error is None, watcher.error
    assert not watcher.torn, f"partial transactions were visible: {watcher.torn[:5]}"
    verify_bank(watcher.records, summary, balances).assert_ok(feed.logs())
    assert len(watcher.records) == summary.events
    feed.assert_running()


def test_bank_into_kafka_in_commit_order_across_sorter_and_sink_kills(
    clusters, services, topic_factory, unique
):
    bank_topic = topic_factory(clusters.a, partitions=PARTITIONS)
    target = unique("ledger")
    feed = services.start_feed(
        "bank-kafka",
        clusters,
        [bank_topic],
        mode="ordered",
        sink_uri=f"kafka://{clusters.b.alias}/{target}",
        pullers=2,
        sorters=1,
        sinks=1,
        config={"staging.partitions": 4},
        settings=SETTINGS,
        timeout=120,
    )
    watcher = TargetWatcher(clusters.b.config, target)
    watcher.start()
    written: dict[str, Any] = {}

    def workload() -> None:
        written["result"] = write_transactions(
            clusters.a.config,
            bank_topic,
            int(os.environ.get("CROSSFEED_TEST_BANK_TRANSFERS", "100000")),
            accounts=200,
            partitions=PARTITIONS,
            skew_partition=3,
            skew_ms=300,
        )

    writer = threading.Thread(target=workload, daemon=True)
    writer.start()
    try:
        # Kill -9 the sorter once the target has moved, then the sink, each restarted.
        _wait_for(
            "first transfers on the target", lambda: len(watcher.records) > 2_000, 180, feed.logs
        )
        sorter = feed.sorters[0]
        sorter.kill()
        sorter.start()
        _moves("the target moves again after the sorter's restart", watcher, feed)
        sink = feed.sinks[0]
        sink.kill()
        sink.start()
        summary, balances = _all_on_target(watcher, writer, written, feed)
    finally:
        watcher.stop()
    _assert_ledger(watcher, summary, balances, feed)


@pytest.fixture
def pg_schema(clusters, unique):
    """A schema name for the sink to create, dropped afterwards (PostgreSQL restarted by
    the test is brought back first)."""
    if not clusters.postgres_uri:
        pytest.skip("no PostgreSQL in this backend")
    schema = unique("s").replace("-", "_").replace(".", "_").lower()[:60]
    yield schema
    drop_schema_after_restarts(clusters.postgres_uri, schema)


def test_bank_into_postgres_never_torn_across_sink_kill_and_database_restart(
    clusters, services, topic_factory, pg_schema
):
    bank_topic = topic_factory(clusters.a, partitions=PARTITIONS)
    feed = services.start_feed(
        "bank-pg",
        clusters,
        [bank_topic],
        mode="ordered",
        sink_uri=f"{clusters.postgres_uri}?schema={pg_schema}",
        pullers=2,
        sorters=1,
        sinks=1,
        config={"staging.partitions": 4, "syncpoint.interval": 1},
        settings=SETTINGS,
        timeout=120,
    )
    sampler = Sampler(clusters.postgres_uri, pg_schema)
    sampler.start()
    transfers = int(os.environ.get("CROSSFEED_TEST_BANK_TRANSFERS", "100000")) // 5
    written: dict[str, Any] = {}

    def workload() -> None:
        written["result"] = write_transactions(
            clusters.a.config,
            bank_topic,
            transfers,
            accounts=200,
            partitions=PARTITIONS,
            skew_partition=5,
            skew_ms=300,
        )

    writer = threading.Thread(target=workload, daemon=True)
    writer.start()
    sink = feed.sinks[0]
    try:
        # kill -9 of the sink, then a PostgreSQL restart, each once rows are arriving.
        _wait_for("the first rows", lambda: _sums(sampler) > 20, 240, feed.logs)
        sink.kill()
        sink.start()
        seen = _sums(sampler)
        _wait_for(
            "rows again after the sink's restart",
            lambda: _sums(sampler) > seen + 20,
            240,
            feed.logs,
        )
        pg = Postgres()
        pg.stop()
        time.sleep(1.0)
        pg.start()
        writer.join(600)
        assert "result" in written, "the bank workload did not finish"
        summary, balances = written["result"]

        def applied() -> bool:
            status = sink.status() or {}
            return int(status.get("applied_commit_ts_us") or -1) >= summary.last_commit_ts

        _wait_for("every transfer in PostgreSQL", applied, 300, feed.logs)
    finally:
        sampler.done.set()
        sampler.join(10)
    with psycopg.connect(clusters.postgres_uri) as conn:
        rows = conn.execute(f'SELECT id, balance FROM "{pg_schema}".accounts').fetchall()
        syncpoints = conn.execute(
            f'SELECT count(*) FROM "{pg_schema}".crossfeed_syncpoint WHERE feed = %s',
            (feed.name,),
        ).fetchone()
    assert dict(rows) == balances
    total = summary.initial_total
    torn = {s for s in sampler.sums if s not in (None, total)}
    assert not torn, f"a reader saw totals other than {total}: {sorted(torn)[:5]}"
    assert _sums(sampler) > 100, "the sampler saw too little to mean anything"
    assert syncpoints is not None and syncpoints[0] >= 1
    feed.assert_running()


def _sums(sampler: Sampler) -> int:
    """Samples that saw accounts (not before the opening transaction arrived)."""
    return sum(1 for s in sampler.sums if s is not None)


@pytest.mark.slow
def test_bank_into_kafka_across_puller_kills_a_paused_puller_and_every_process_at_once(
    clusters, services, topic_factory, unique
):
    """The front of the pipeline under faults, 16 source partitions: kill -9 of a puller
    (restarted), a puller stopped past its session (fenced, then resumed), then kill -9 of
    both pullers, the sorter and the sink together, all restarted — while the bank
    workload runs at a steady rate. Same checks as above."""
    partitions = 16
    bank_topic = topic_factory(clusters.a, partitions=partitions)
    target = unique("ledger")
    feed = services.start_feed(
        "bank-faults",
        clusters,
        [bank_topic],
        mode="ordered",
        sink_uri=f"kafka://{clusters.b.alias}/{target}",
        pullers=2,
        sorters=1,
        sinks=1,
        config={"staging.partitions": 4},
        settings={**SETTINGS, "coordinator": {"failover_timeout_s": 6}},
        timeout=120,
    )
    watcher = TargetWatcher(clusters.b.config, target)
    watcher.start()
    written: dict[str, Any] = {}

    def workload() -> None:  # ~100 s: every fault below happens while it writes
        written["result"] = write_transactions(
            clusters.a.config, bank_topic, 150_000, accounts=200, partitions=partitions,
            skew_partition=3, skew_ms=300, rate=1500.0,
        )  # fmt: skip

    writer = threading.Thread(target=workload, daemon=True)
    writer.start()
    try:
        _moves("the first transfers on the target", watcher, feed)
        first, second = feed.pullers
        first.kill()
        time.sleep(1.0)
        first.start()
        _moves("the target moves after a puller's restart", watcher, feed, 4_000)
        second.pause()  # past the 6 s session: its tasks move, it is fenced
        time.sleep(12)
        second.resume()
        _moves("the target moves after a paused puller came back", watcher, feed, 4_000)
        everyone = [first, second, feed.sorters[0], feed.sinks[0]]
        for process in everyone:
            process.kill()
        time.sleep(2.0)
        for process in everyone:
            process.start()
        summary, balances = _all_on_target(watcher, writer, written, feed)
    finally:
        watcher.stop()
    _assert_ledger(watcher, summary, balances, feed)
