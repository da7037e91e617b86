"""The PostgreSQL sink of ordered feeds against real brokers and the stack's PostgreSQL.

The sorted stream is written by hand in the sorter's format (tests/support/sorted_stream.py)
with bank-like ChangeEvents; the sink runs as a real ``crossfeed sink run`` process.
"""

from __future__ import annotations

import random
import time
from typing import Any

import psycopg
import pytest

from crossfeed.dlq import ERROR_CLASS, ERROR_MESSAGE, FEED, OFFSET, STAGE
from crossfeed.local.postgres import Postgres
from crossfeed.wire import topics
from tests.support.postgres import Sampler, drop_schema_after_restarts
from tests.support.services import EXIT_FEED_STOPPED
from tests.support.sorted_stream import Change, SortedWriter, Txn, applying, change_event
from tests.support.verify import read_many

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

FAST = {"sink": {"commit_interval_ms": 50}}
# An hour ago (commit_ts, µs): the sorted records' timestamps come from it, and the
# broker's time retention counts from record timestamps.
BASE_TS = int(time.time() - 3600) * 1_000_000
ACCOUNTS = [("id", "long", True), ("balance", "long", False), ("owner", "string", False)]
INITIAL = 1000


def _schema(conn: psycopg.Connection[Any]) -> str:
    row = conn.execute("SELECT current_schema()").fetchone()
    assert row is not None
    return str(row[0])


def _start(services, clusters, conn, name: str, config: dict[str, Any] | None = None, **kw):
    uri = f"{clusters.postgres_uri}?schema={_schema(conn)}"
    kw.setdefault("settings", FAST)
    return services.start_feed(
        name, clusters, ["unused"], mode="ordered", pullers=0, sink_uri=uri, config=config, **kw
    )


def _account(i: int, balance: int, op: str = "update") -> Change:
    value = change_event(
        "accounts", op, ACCOUNTS, {"id": i}, {"id": i, "balance": balance, "owner": f"o{i}"}
    )
    return Change(str(i).encode(), value)


class Bank:
    """Bank transfers as source transactions, and the state they leave."""

    def __init__(self, accounts: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.balances = dict.fromkeys(range(accounts), INITIAL)
        self.n = 0

    @property
    def total(self) -> int:
        return INITIAL * len(self.balances)

    def _txn(self, changes: list[Change]) -> Txn:
        self.n += 1
        return Txn(f"bank-{self.n:08d}", BASE_TS + self.n * 100, tuple(changes))

    def opening(self) -> Txn:
        return self._txn([_account(i, b, "insert") for i, b in self.balances.items()])

    def transfer(self) -> Txn:
        a, b = self.rng.sample(sorted(self.balances), 2)
        amount = self.rng.randint(1, 50)
        self.balances[a] -= amount
        self.balances[b] += amount
        return self._txn([_account(a, self.balances[a]), _account(b, self.balances[b])])


def _final(conn: psycopg.Connection[Any]) -> dict[int, int]:
    return dict(conn.execute("SELECT id, balance FROM accounts").fetchall())


def _write_bank(writer: SortedWriter, bank: Bank, transfers: int, rng: random.Random, on=None):
    history: list[Txn] = []
    for i in range(transfers):
        t = bank.transfer()
        if rng.random() < 0.02:
            writer.txn(t, cut_after=rng.randint(0, 1))
        if rng.random() < 0.01 and history:
            for old in history[-rng.randint(1, 5) :]:
                writer.txn(old)
        writer.txn(t)
        history = [*history[-10:], t]
        if i % 100 == 99:
            writer.resolved(t.commit_ts)
        if on is not None:
            on(i)
    return history


def test_bank_atomic_totals_final_state_lww_and_syncpoint(clusters, services, postgres):
    schema = _schema(postgres)
    feed = _start(services, clusters, postgres, "pgbank", {"syncpoint.interval": "1"})
    sink = feed.sinks[0]
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
    sampler = Sampler(clusters.postgres_uri, schema)
    sampler.start()
    bank = Bank(200, seed=1)
    writer.txn(bank.opening())
    rng = random.Random(2)

    def pause_halfway(i: int) -> None:
        # Once the first half is applied, a pause longer than syncpoint.interval: the
        # second half's commits are due another syncpoint however fast the sink applies.
        if i == 2499:
            writer.flush()
            half = BASE_TS + bank.n * 100  # the resolved mark written after transfer 2499
            sink.wait_status(lambda s: s["checkpoint_ts_us"] >= half, 120, "half applied")
            time.sleep(1.2)

    _write_bank(writer, bank, 5000, rng, on=pause_halfway)
    final_r = BASE_TS + (bank.n + 1) * 100
    writer.resolved(final_r)
    writer.flush()
    status = sink.wait_status(lambda s: s["checkpoint_ts_us"] == final_r, 120, "caught up")
    sampler.done.set()
    sampler.join(10)

    assert _final(postgres) == bank.balances
    bad = {s for s in sampler.sums if s not in (None, bank.total)}
    assert not bad, f"a reader saw totals other than {bank.total}: {sorted(bad)[:5]}"
    assert sampler.sums.count(bank.total) > 10
    # bookkeeping: the position row, syncpoints
    row = postgres.execute(
        "SELECT commit_ts, txn, checkpoint_ts FROM crossfeed_position WHERE feed = %s", (feed.name,)
    ).fetchone()
    assert row == (bank.n * 100 + BASE_TS, f"bank-{bank.n:08d}", final_r)
    assert status["applied"] == f"{row[0]}/{row[1]}"
    syncpoints = postgres.execute(
        "SELECT consistency_ts FROM crossfeed_syncpoint WHERE feed = %s ORDER BY target_ts",
        (feed.name,),
    ).fetchall()
    assert len(syncpoints) >= 2 and syncpoints[-1][0] <= final_r
    assert [s for (s,) in syncpoints] == sorted(s for (s,) in syncpoints)
    assert status["syncpoint_ts_us"] == syncpoints[-1][0]
    assert sink.metric("crossfeed_sink_source_transactions_total") == bank.n
    assert (sink.metric("crossfeed_sink_transaction_commit_seconds_count") or 0) > 0
    assert (sink.metric("crossfeed_sink_cut_short_transactions_total") or 0) > 0
    assert (sink.metric("crossfeed_sink_replayed_transactions_total") or 0) > 0

    # Last writer wins: a newer change made elsewhere is not overwritten by an older one.
    postgres.execute(
        "UPDATE accounts SET balance = -1, _crossfeed_commit_ts = %s WHERE id = 0",
        (final_r + 10_000,),
    )
    stale = Txn("stale", final_r + 100, (_account(0, 12345), _account(1, bank.balances[1] + 1)))
    writer.txn(stale)
    writer.resolved(final_r + 200)
    writer.flush()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == final_r + 200, 30, "past the stale one")
    assert postgres.execute("SELECT balance FROM accounts WHERE id = 0").fetchone() == (-1,)
    assert postgres.execute("SELECT balance FROM accounts WHERE id = 1").fetchone() == (
        bank.balances[1] + 1,
    )
    assert sink.metric("crossfeed_sink_rows_skipped_lww_total", {"table": "accounts"}) == 1


@pytest.fixture
def restartable(clusters, unique):
    """A fresh schema dropped through a new connection (the test restarts PostgreSQL)."""
    schema = unique("s").replace("-", "_").replace(".", "_").lower()[:60]
    with psycopg.connect(clusters.postgres_uri, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        yield conn
    drop_schema_after_restarts(clusters.postgres_uri, schema)


def test_kill_9_and_database_restart_lose_nothing(clusters, services, restartable):
    schema = _schema(restartable)
    feed = _start(services, clusters, restartable, "pgkill")
    sink = feed.sinks[0]
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name), "mixed", seed=4)
    sampler = Sampler(clusters.postgres_uri, schema)
    sampler.start()
    bank = Bank(500, seed=3)
    writer.txn(bank.opening())
    rng = random.Random(4)
    events: list[str] = []

    def disrupt(i: int) -> None:
        if i not in (6000, 14000):
            return
        writer.flush()
        target = BASE_TS + (bank.n // 2) * 100
        status = sink.wait_status(lambda s: s["applied_commit_ts_us"] >= target, 60)
        if i == 6000:
            sink.restart(hard=True)  # kill -9 mid-stream
            events.append(f"kill -9 at {status['applied']}")
        else:
            pg = Postgres()
            pg.stop()
            time.sleep(1.0)
            pg.start()
            events.append(f"postgres restarted at {status['applied']}")

    _write_bank(writer, bank, 20_000, rng, disrupt)
    final_r = BASE_TS + (bank.n + 1) * 100
    writer.resolved(final_r)
    writer.flush()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == final_r, 180, "caught up")
    sampler.done.set()
    sampler.join(10)
    with psycopg.connect(clusters.postgres_uri, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        assert _final(conn) == bank.balances
    bad = {s for s in sampler.sums if s not in (None, bank.total)}
    assert not bad, f"a reader saw totals other than {bank.total}: {sorted(bad)[:5]}"
    assert len(events) == 2 and sink.exit_codes == [-9]
    # What a user sees: the same sink process is alive and caught up after the database
    # restart, by itself. (Whether it had to retry a write depends on where the restart
    # fell between its writes: a counter of retries is not the behaviour.)
    sink.assert_alive()


def _dead_letters(clusters, feed: str) -> list[Any]:
    records = read_many(clusters.b.config, [topics.DLQ])[topics.DLQ]
    return [r for part in records.values() for r in part if r.header(FEED) == feed.encode()]


def test_bad_events_reach_the_dlq_with_context(clusters, services, postgres):
    postgres.execute("CREATE TABLE kv (k text PRIMARY KEY, v bigint)")
    feed = _start(services, clusters, postgres, "pgdlq", {"postgres.auto.create": "false"})
    sink = feed.sinks[0]
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
    cols = [("k", "string", True), ("v", "long", False)]
    good = change_event("kv", "insert", cols, {"k": "a"}, {"k": "a", "v": 1})
    mismatch = change_event(
        "kv",
        "insert",
        [("k", "string", True), ("v", "string", False)],
        {"k": "b"},
        {"k": "b", "v": "x"},
    )
    no_key = change_event("kv", "insert", cols, {}, {"k": "c", "v": 3})
    unknown = change_event("nope", "insert", cols, {"k": "d"}, {"k": "d", "v": 4})
    changes = [Change(b"a", good), Change(b"b", mismatch), Change(b"c", no_key)]
    changes += [Change(b"d", unknown), Change(b"e", b"not avro at all")]
    writer.txn(Txn("t1", BASE_TS + 1, tuple(changes)))
    writer.resolved(BASE_TS + 2)
    writer.flush()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == BASE_TS + 2, 60, "past the bad ones")
    assert postgres.execute("SELECT k, v FROM kv").fetchall() == [("a", 1)]
    assert postgres.execute("SELECT to_regclass('nope')").fetchone() == (None,)
    letters = []
    deadline = time.monotonic() + 30
    while len(letters) < 4 and time.monotonic() < deadline:
        letters = _dead_letters(clusters, feed.name)
        time.sleep(0.5)
    by_key = {r.key: r for r in letters}
    assert set(by_key) == {b"b", b"c", b"d", b"e"}, [r.key for r in letters]
    assert by_key[b"b"].header(ERROR_CLASS) == b"TypeMismatch"
    assert b"is bigint" in (by_key[b"b"].header(ERROR_MESSAGE) or b"")
    assert by_key[b"c"].header(ERROR_CLASS) == b"MissingKey"
    assert by_key[b"d"].header(ERROR_CLASS) == b"UnknownTable"
    assert b"postgres.auto.create" in (by_key[b"d"].header(ERROR_MESSAGE) or b"")
    assert by_key[b"e"].header(ERROR_CLASS) == b"UndecodableValue"
    for r in letters:
        assert r.header(STAGE) == b"sink" and r.header(OFFSET) is not None
        assert r.header("crossfeed-txn") is not None  # the original headers are kept
    assert by_key[b"b"].value == mismatch
    assert sink.metric("crossfeed_sink_dlq_records_total") == 4


def test_errors_tolerance_none_stops_the_feed(clusters, services, postgres):
    feed = _start(
        services,
        clusters,
        postgres,
        "pgstop",
        {"postgres.auto.create": "false", "errors.tolerance": "none"},
    )
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
    cols = [("k", "string", True), ("v", "long", False)]
    unknown = change_event("nope", "insert", cols, {"k": "d"}, {"k": "d", "v": 4})
    writer.txn(Txn("t1", BASE_TS + 1, (Change(b"d", unknown),)))
    writer.flush()
    sink = feed.sinks[0]
    assert sink.wait_exit(60) == EXIT_FEED_STOPPED
    assert "UnknownTable" in sink.log_text()


def test_consistency_ts_and_syncpoint_in_crossfeed_status(
    clusters, services, postgres, tmp_path_factory
):
    import subprocess
    import sys

    from crossfeed.client.rest import CoordinatorClient
    from tests.integration.test_coordinator_process import coordinator_group, wait_for

    feed = _start(services, clusters, postgres, "pgstatus", {"syncpoint.interval": "0.5"})
    group = coordinator_group(clusters, tmp_path_factory.mktemp("pgstatus"), 1, token=None)
    coordinators = next(group)
    try:
        url = coordinators.leader().url
        with CoordinatorClient(url) as api:
            api.create_feed(feed.spec)
            writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
            bank = Bank(10, seed=5)
            writer.txn(bank.opening())
            for _ in range(20):
                writer.txn(bank.transfer())
            final_r = BASE_TS + (bank.n + 1) * 100
            writer.resolved(final_r)
            writer.flush()

            marks = [final_r]

            def published() -> dict | None:
                # The sorter writes a resolved mark every micro-batch, idle or not; each
                # is a commit, and one every syncpoint.interval writes a syncpoint.
                marks.append(marks[-1] + 1)
                writer.resolved(marks[-1])
                writer.flush()
                row = next(f for f in api.status() if f["name"] == feed.name)
                done = row["consistency_ts_us"] >= final_r and row["syncpoint_ts_us"] >= final_r
                return row if done else None

            row = wait_for(published, 60, f"consistency_ts and syncpoint {final_r} published", 0.2)
            assert row["syncpoint_at_ms"] > 0 and row["syncpoint_ts_us"] <= marks[-1]
            shown = subprocess.run(
                [sys.executable, "-m", "crossfeed.cli.main", "status", "--server", url],
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            assert f"{feed.name}: syncpoint source" in shown, shown
            api.remove_feed(feed.name)
    finally:
        next(group, None)


def test_ddl_barriers_and_rows_the_database_refuses(clusters, services, postgres):
    """ddl events create a table and add a column in their place in the order; a row a
    table constraint refuses goes to the DLQ alone (the batch is written again change by
    change), the rest of its transaction and the ones around it are applied."""
    feed = _start(services, clusters, postgres, "pgddl")
    sink = feed.sinks[0]
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
    v1 = [("k", "string", True), ("n", "long", False)]
    v2 = [*v1, ("flag", "boolean", False)]
    create = change_event("items", "ddl", v1, {}, None, ddl="create table")
    add = change_event("items", "ddl", v2, {}, None, ddl="add column flag", schema_version=2)

    def row(k: str, n: int, flag: bool | None = None) -> Change:
        after: dict[str, Any] = {"k": k, "n": n}
        cols, version = v1, 1
        if flag is not None:
            after["flag"], cols, version = flag, v2, 2
        return Change(
            k.encode(),
            change_event("items", "insert", cols, {"k": k}, after, schema_version=version),
        )

    writer.txn(Txn("ddl1", BASE_TS + 1, (Change(None, create),)))
    writer.txn(Txn("t1", BASE_TS + 2, (row("a", 1), row("b", 2))))
    writer.txn(Txn("ddl2", BASE_TS + 3, (Change(None, add),)))
    writer.txn(Txn("t2", BASE_TS + 4, (row("c", 3, True), row("a", 10, False))))
    writer.resolved(BASE_TS + 5)
    writer.flush()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == BASE_TS + 5, 60, "past the ddl")
    assert postgres.execute("SELECT k, n, flag FROM items ORDER BY k").fetchall() == [
        ("a", 10, False),
        ("b", 2, None),
        ("c", 3, True),
    ]
    # a constraint of the user's: n below zero is refused by the database
    postgres.execute("ALTER TABLE items ADD CONSTRAINT positive CHECK (n >= 0)")
    writer.txn(Txn("t3", BASE_TS + 6, (row("d", 4), row("e", -1), row("f", 6))))
    writer.txn(Txn("t4", BASE_TS + 7, (row("g", 7),)))
    writer.resolved(BASE_TS + 8)
    writer.flush()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == BASE_TS + 8, 60, "past the refused row")
    assert [k for (k,) in postgres.execute("SELECT k FROM items ORDER BY k").fetchall()] == [
        "a",
        "b",
        "c",
        "d",
        "f",
        "g",
    ]
    letters: list[Any] = []
    deadline = time.monotonic() + 30
    while not letters and time.monotonic() < deadline:
        letters = _dead_letters(clusters, feed.name)
        time.sleep(0.5)
    assert [r.key for r in letters] == [b"e"]
    assert letters[0].header(ERROR_CLASS) == b"CheckViolation"
    assert b"positive" in (letters[0].header(ERROR_MESSAGE) or b"")


def test_a_standby_instance_takes_over(clusters, services, postgres):
    """Two sink instances: one applies (advisory lock), the other stands by; kill -9 the
    one applying and the other goes on from the position row."""
    feed = _start(services, clusters, postgres, "pgha", sinks=2)
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
    bank = Bank(100, seed=7)
    writer.txn(bank.opening())
    rng = random.Random(8)
    _write_bank(writer, bank, 2000, rng)
    writer.flush()

    first = applying(feed.sinks)
    standby = next(s for s in feed.sinks if s is not first)
    assert (standby.status() or {})["state"] == "standby"
    first.kill()
    _write_bank(writer, bank, 2000, rng)
    final_r = BASE_TS + (bank.n + 1) * 100
    writer.resolved(final_r)
    writer.flush()
    standby.wait_status(lambda s: s["checkpoint_ts_us"] == final_r, 120, "taken over")
    assert _final(postgres) == bank.balances
