"""The PostgreSQL sink's transactions against a fake connection (services/sink/postgres/sink.py):
whole source transactions per database transaction with the position row, rollback and
a re-read from the committed position after a refused write, a lost connection or a
moved position row, and the error state cleared once it writes again.

The fake database keeps what a connection wrote apart until its COMMIT (savepoints
included), so a test sees exactly what a reader of the database would. Nothing here
asserts how PostgreSQL behaves: tests/integration/test_postgres_sink.py runs the same
code against a real server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from crossfeed.config import Settings
from crossfeed.dlq import ERROR_CLASS, FeedStopped
from crossfeed.feeds import FeedSpec
from crossfeed.services.sink.postgres import sink as postgres_sink
from crossfeed.services.sink.postgres.sink import PostgresSink
from crossfeed.wire import headers, topics
from tests.support.sorted_stream import change_event

ACCOUNTS = [("id", "long", True), ("balance", "long", False), ("owner", "string", False)]
COLUMNS = [("id", "bigint"), ("balance", "bigint"), ("owner", "text")]
Header = tuple[str, bytes | None]


class NegativeBalance(psycopg.errors.CheckViolation):  # the dead letter names it
    """What the fake database says to a negative balance (a CHECK constraint)."""


class FakeDatabase:
    """The committed state: the position row, the accounts, and each committed
    transaction's account writes (ids, in order); who holds the feed's advisory lock."""

    def __init__(self) -> None:
        self.position: tuple[int, str, int, int] | None = None  # ts, txn, checkpoint, offset
        self.accounts: dict[int, int] = {}  # id -> balance
        self.commits: list[list[int]] = []
        self.lock: FakeConnection | None = None
        self.connections: list[FakeConnection] = []
        self.lose_at_commit = 0  # COMMITs that fail with a lost connection, from now on
        self.epoch = 0  # the position row's fencing epoch (crossfeed/fencing.py)
        self.failed_over_at: datetime | None = None

    def connect(self, *args: Any, **kwargs: Any) -> FakeConnection:
        conn = FakeConnection(self)
        self.connections.append(conn)
        return conn


class FakeResult:
    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int = 0) -> None:
        self.rows, self.rowcount = rows, rowcount

    def fetchone(self) -> tuple[Any, ...] | None:
        return self.rows[0] if self.rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self.rows


class FakeConnection:
    """One session: its writes (account upserts, the position update) wait in a list
    until COMMIT; ROLLBACK and ROLLBACK TO SAVEPOINT drop them. As in PostgreSQL, after
    a refused statement the transaction takes nothing more until rolled back."""

    def __init__(self, db: FakeDatabase) -> None:
        self.db = db
        self.pending: list[tuple[str, Any]] = []
        self.savepoints: dict[str, int] = {}
        self.statements: list[str] = []
        self.rowcount = 0
        self.closed = False
        self.aborted = False  # a statement was refused: only a rollback is taken

    def execute(self, sql: str, params: Any = None) -> FakeResult:
        if self.closed:
            raise psycopg.OperationalError("the connection is closed")
        self.statements.append(sql.split()[0])
        if sql.startswith("ROLLBACK TO SAVEPOINT"):
            del self.pending[self.savepoints[sql.split()[3]] :]
            self.aborted = False
            return FakeResult([])
        if self.aborted:
            raise psycopg.errors.InFailedSqlTransaction("current transaction is aborted")
        if "pg_try_advisory_lock" in sql:
            free = self.db.lock in (None, self)
            if free:
                self.db.lock = self
            return FakeResult([(free,)])
        if sql.startswith("INSERT INTO") and "crossfeed_position" in sql:
            if self.db.position is None:
                self.db.position = (-1, "", 0, -1)
            return FakeResult([])
        if sql.startswith("SELECT commit_ts, txn, checkpoint_ts, sorted_offset"):
            fence = (self.db.epoch, self.db.failed_over_at)
            return FakeResult([(*self.db.position, *fence)] if self.db.position else [])
        if sql.startswith("SELECT attname FROM pg_attribute"):  # the fence's columns are there
            return FakeResult([("epoch",), ("failed_over_at",)])
        if "FROM pg_attribute" in sql and "pg_index" not in sql:
            return FakeResult([*COLUMNS, ("_crossfeed_commit_ts", "bigint")])
        if "pg_index" in sql:
            return FakeResult([("id",)])
        if sql.startswith("UPDATE") and "crossfeed_position" in sql:
            ts, txn, checkpoint, offset, _, expected, epoch = params
            current = self._position()
            if current is None or current[3] != expected or epoch != self.db.epoch:
                return FakeResult([], 0)
            self.pending.append(("position", (ts, txn, checkpoint, offset)))
            return FakeResult([], 1)
        if "crossfeed_syncpoint" in sql:
            return FakeResult([(1_700_000_000_000,)])
        if sql.startswith("INSERT INTO") and "unnest" in sql:
            ids, balances = params[0], params[1]
            if any(b < 0 for b in balances):
                self.aborted = True
                raise NegativeBalance(f"balance below 0 in {ids}")
            self.pending.append(("accounts", dict(zip(ids, balances, strict=True))))
            self.rowcount = len(ids)
            return FakeResult([], len(ids))
        if sql.startswith("SAVEPOINT"):
            self.savepoints[sql.split()[1]] = len(self.pending)
        elif not sql.startswith(("RELEASE", "CREATE")):
            raise AssertionError(f"the fake does not know {sql!r}")
        return FakeResult([])

    def _position(self) -> tuple[int, str, int, int] | None:
        moved = [v for kind, v in self.pending if kind == "position"]
        return moved[-1] if moved else self.db.position

    def cursor(self) -> FakeConnection:
        return self

    def __enter__(self) -> FakeConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def commit(self) -> None:
        self.statements.append("COMMIT")
        if self.aborted:  # PostgreSQL answers a COMMIT of an aborted transaction so
            self.rollback()
            return
        if self.db.lose_at_commit:
            self.db.lose_at_commit -= 1
            self.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        written: list[int] = []
        for kind, value in self.pending:
            if kind == "position":
                self.db.position = value
            else:
                self.db.accounts.update(value)
                written.extend(value)
        if written:
            self.db.commits.append(written)
        self.pending.clear()
        self.savepoints.clear()

    def rollback(self) -> None:
        self.statements.append("rollback()")
        self.aborted = False
        self.pending.clear()
        self.savepoints.clear()

    def close(self) -> None:
        self.closed = True
        self.pending.clear()
        if self.db.lock is self:
            self.db.lock = None


class SortedRecord:
    def __init__(self, offset: int, hdrs: list[Header], value: bytes | None = None) -> None:
        self._offset, self._hdrs, self._value = offset, hdrs, value

    def topic(self) -> str:
        return topics.sorted_("s")

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return None

    def value(self) -> bytes | None:
        return self._value

    def headers(self) -> list[Header]:
        return self._hdrs

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    def error(self) -> None:
        return None


class FakeConsumer:
    """The sorted partition: read from where the sink assigned it, a few records a read."""

    def __init__(self, log: list[SortedRecord], per_read: int = 100) -> None:
        self.log, self.per_read = log, per_read
        self.next = 0
        self.assigned: list[int] = []

    def assign(self, partitions: list[Any]) -> None:
        offset = partitions[0].offset
        self.next = 0 if offset < 0 else offset  # OFFSET_BEGINNING is negative
        self.assigned.append(self.next)

    def consume(self, num_messages: int, timeout: float) -> list[SortedRecord]:
        read = self.log[self.next : self.next + min(num_messages, self.per_read)]
        self.next += len(read)
        return read

    def poll(self, timeout: float) -> SortedRecord | None:
        read = self.consume(1, timeout)
        return read[0] if read else None

    def commit(self, offsets: Any = None, asynchronous: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


class FakeDlq:
    def __init__(self) -> None:
        self.letters: list[dict[str, bytes]] = []

    def produce(self, topic: str, **kwargs: Any) -> None:
        self.letters.append({k: v for k, v in kwargs["headers"] if k.startswith("crossfeed")})

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = -1) -> int:
        return 0


class NoWait:
    """The service's stop event, never set; a backoff returns at once."""

    def is_set(self) -> bool:
        return False

    def wait(self, timeout: float | None = None) -> bool:
        return False


def stream(
    *txns: tuple[str, int, list[tuple[int, int]]], inline: bool = False
) -> list[SortedRecord]:
    """Sorted records of whole source transactions: (txn id, commit_ts, [(id, balance)]),
    framed by begin/commit records, or ``inline`` (each record with crossfeed-order)."""
    records: list[SortedRecord] = []
    for txn, ts, rows in txns:
        if not inline:
            records.append(SortedRecord(len(records), marker("begin", txn, ts, len(rows))))
        for seq, (account, balance) in enumerate(rows, 1):
            hdrs = [(headers.COMMIT_TS, b"%d" % ts), (headers.TXN, f"{txn}/{seq}/0".encode())]
            if inline:
                hdrs.append((headers.ORDER, f"{seq}/{len(rows)}/{ts}/{txn}".encode()))
            value = change_event(
                "accounts",
                "insert",
                ACCOUNTS,
                {"id": account},
                {"id": account, "balance": balance, "owner": "o"},
            )
            records.append(SortedRecord(len(records), hdrs, value))
        if not inline:
            records.append(SortedRecord(len(records), marker("commit", txn, ts, len(rows))))
    return records


def marker(kind: str, txn: str, ts: int, count: int) -> list[Header]:
    return [
        (headers.TYPE, kind.encode()),
        (headers.COMMIT_TS, str(ts).encode()),
        (headers.TXN, f"{txn}/0/{count}".encode()),
    ]


@pytest.fixture
def db(monkeypatch: pytest.MonkeyPatch) -> FakeDatabase:
    database = FakeDatabase()
    monkeypatch.setattr(postgres_sink.psycopg, "connect", database.connect)
    return database


def new_sink(log: list[SortedRecord], per_read: int = 100, tolerance: str = "all") -> PostgresSink:
    settings = Settings(clusters={"dc-a": {"bootstrap.servers": "127.0.0.1:1"}})
    feed = FeedSpec.model_validate(
        {"name": "s", "source": "dc-a", "sink-uri": "postgresql://u@127.0.0.1:1/db?schema=bank",
         "topics": ["bank"], "mode": "ordered", "config": {"errors.tolerance": tolerance}}
    )  # fmt: skip
    sink = PostgresSink(settings, feed, "sink-1", {})
    sink.consumer, sink.dlq = FakeConsumer(log, per_read), FakeDlq()
    sink.keep_up_ms = sink.backlog_ms = 0  # every boundary is due: a commit per chance
    return sink


def run(sink: PostgresSink, steps: int = 20) -> None:
    for _ in range(steps):
        sink.step(NoWait())  # type: ignore[arg-type]


@pytest.mark.parametrize("inline", [False, True], ids=["framed", "inline"])
def test_each_database_transaction_holds_whole_source_transactions_and_the_position(db, inline):
    log = stream(("t1", 100, [(1, 10), (2, 20)]), ("t2", 200, [(3, 30)]), inline=inline)
    sink = new_sink(log, per_read=2)  # reads end inside a transaction: not a place to commit
    run(sink)
    assert db.commits == [[1, 2], [3]]
    assert db.accounts == {1: 10, 2: 20, 3: 30}
    assert db.position == (200, "t2", 0, len(log))  # the next sorted offset to read
    assert (sink.committed.position.txn, sink.committed_offset) == ("t2", len(log))


def test_a_source_transaction_cut_short_is_never_committed(db):
    whole = stream(("t1", 100, [(1, 10), (2, 20)]), ("t2", 200, [(3, 30)]))
    cut = [*whole[:2], *whole[4:]]  # t1's begin and first change, then t2's begin
    log = [SortedRecord(offset, r.headers(), r.value()) for offset, r in enumerate(cut)]
    sink = new_sink(log, per_read=1)
    run(sink)
    assert db.commits == [[3]]
    assert db.accounts == {3: 30}


def test_an_inline_transaction_cut_short_is_never_committed(db):
    whole = stream(("t1", 100, [(1, 10), (2, 20)]), ("t2", 200, [(3, 30)]), inline=True)
    cut = [whole[0], whole[2]]  # t1's first change, then t2's only one
    log = [SortedRecord(offset, r.headers(), r.value()) for offset, r in enumerate(cut)]
    sink = new_sink(log, per_read=1)
    run(sink)
    assert db.commits == [[3]]
    assert db.accounts == {3: 30}
    assert db.position is not None and db.position[:2] == (200, "t2")


@pytest.mark.parametrize("inline", [False, True], ids=["framed", "inline"])
def test_a_refused_write_is_rolled_back_and_read_again_change_by_change(db, inline):
    txns = (("t1", 100, [(1, 10)]), ("t2", 200, [(2, 20), (3, -5), (4, 40)]))
    log = stream(*txns, inline=inline)
    sink = new_sink(log)
    run(sink)
    conn = db.connections[-1]
    assert "rollback()" in conn.statements  # the batch with the refused row, undone whole
    # read again from after t1, committed
    assert sink.consumer.assigned == [0, 1 if inline else 3]
    assert db.commits == [[1], [2, 4]]  # the refused change alone is left out of t2
    assert db.accounts == {1: 10, 2: 20, 4: 40}
    assert [letter[ERROR_CLASS] for letter in sink.dlq.letters] == [b"NegativeBalance"]
    assert db.position is not None and db.position[:2] == (200, "t2")
    assert sink.state == "normal"


def test_a_refused_write_stops_the_feed_with_errors_tolerance_none(db):
    sink = new_sink(stream(("t1", 100, [(1, -1)])), tolerance="none")
    with pytest.raises(FeedStopped):
        run(sink)
    assert db.commits == [] and db.accounts == {}
    assert sink.conn is None and db.connections[-1].closed


def test_a_lost_connection_resumes_from_the_committed_position_and_clears_the_error(db):
    log = stream(("t1", 100, [(1, 10)]), ("t2", 200, [(2, 20)]), ("t3", 300, [(3, 30)]))
    sink = new_sink(log, per_read=4)  # t1 whole in the first read
    sink.step(NoWait())  # type: ignore[arg-type]  # connects
    sink.step(NoWait())  # type: ignore[arg-type]  # t1, committed
    assert db.commits == [[1]]
    db.lose_at_commit = 1
    sink.step(NoWait())  # type: ignore[arg-type]  # t2: its COMMIT is lost
    assert sink.state == "error" and "server closed the connection" in (sink.last_error or "")
    assert sink.conn is None and db.accounts == {1: 10}
    committed = db.position
    assert committed is not None and committed[:2] == (100, "t1")
    run(sink)
    assert sink.consumer.assigned == [0, committed[3]]  # back where t1 ended
    assert db.commits == [[1], [2], [3]]  # t2 once, after the reconnection
    assert (sink.state, sink.last_error) == ("normal", None)


def test_a_new_instance_starts_from_the_position_row_and_drops_what_it_covers(db):
    log = stream(("t1", 100, [(1, 10)]), ("t2", 200, [(2, 20)]))
    first = new_sink(log)
    run(first)
    first.shutdown()
    db.position = (100, "t1", 0, 0)  # as if t2 were not applied and the offset were lost
    db.accounts.clear()
    second = new_sink(log)
    run(second)
    assert second.consumer.assigned == [0]
    assert db.accounts == {2: 20}  # t1 is at or below the position: a replay, dropped
    assert db.position[:2] == (200, "t2")


def test_one_instance_applies_and_a_moved_position_row_fences_it(db):
    log = stream(("t1", 100, [(1, 10)]), ("t2", 200, [(2, 20)]))
    first, second = new_sink(log, per_read=4), new_sink(log)
    first.step(NoWait())  # type: ignore[arg-type]
    run(second, 3)
    assert second.state == "standby" and second.conn is None  # the lock is taken
    first.step(NoWait())  # type: ignore[arg-type]  # t1
    assert db.position is not None
    db.position = (*db.position[:3], 99)  # another writer moved the row
    first.step(NoWait())  # type: ignore[arg-type]  # t2: the UPDATE finds no row to move
    assert first.state == "error" and "another sink instance" in (first.last_error or "")
    assert first.conn is None and db.accounts == {1: 10}
    assert db.lock is None  # its lock went with its connection


def test_a_failover_fences_the_sink_that_applies_and_every_later_one(db):
    log = stream(("t1", 100, [(1, 10)]), ("t2", 200, [(2, 20)]), ("t3", 300, [(3, 30)]))
    late = new_sink(log, per_read=4)
    late.step(NoWait())  # type: ignore[arg-type]  # connects under epoch 0
    late.step(NoWait())  # type: ignore[arg-type]  # t1
    assert db.accounts == {1: 10}
    # A failover (crossfeed/fencing.py) while it is paused: the epoch moves, the row is
    # marked; its connection was not ended (say the failover could not signal it).
    db.epoch, db.failed_over_at = 1, datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    late.step(NoWait())  # type: ignore[arg-type]  # t2: its commit finds no row to move
    assert db.accounts == {1: 10} and late.conn is None
    assert "under epoch 0" in (late.last_error or "")
    run(late, 5)  # it comes back: the row says failed over, it applies nothing
    assert late.state == "fenced" and late.conn is None and db.lock is None
    assert "was failed over at 2026-01-02 03:04:05" in (late.last_error or "")
    fresh = new_sink(log)
    run(fresh, 5)
    assert fresh.state == "fenced" and db.accounts == {1: 10}
    assert db.position is not None and db.position[:2] == (100, "t1")
