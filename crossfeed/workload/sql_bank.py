"""The bank workload in SQL, for a database captured by Debezium (``--input debezium``):
``accounts`` and a ``transfers`` ledger with foreign keys to it. Each transfer is one
database transaction over both tables — debit, credit, ledger row — so the total balance
is the same in every state the source ever had, and no ledger row exists without its
accounts. Concurrent sessions make commits interleave.

:class:`Sampler` reads the *target* database while a feed runs, each sample one
REPEATABLE READ snapshot: a torn source transaction would show as a total that is off, or
a ledger row whose account is missing. :func:`rows` reads a table for the final
row-for-row comparison of source and target, :func:`compare` makes it for both tables.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg

OPENING_BALANCE = 1_000
RETRIES = 5
ACCOUNT_COLUMNS = ("id", "balance", "owner", "opened", "credit_limit")
TRANSFER_COLUMNS = ("id", "src", "dst", "amount", "at", "memo", "ref")
TABLES = {"accounts": ACCOUNT_COLUMNS, "transfers": TRANSFER_COLUMNS}


def create(uri: str, accounts: int, schema: str = "public") -> int:
    """The two tables in ``schema`` with ``accounts`` opened; returns the total balance."""
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(
            f'CREATE TABLE "{schema}".accounts (id integer PRIMARY KEY, balance bigint NOT NULL, '
            "owner text NOT NULL, opened date NOT NULL, credit_limit numeric(12,2))"
        )
        conn.execute(
            f'CREATE TABLE "{schema}".transfers (id bigserial PRIMARY KEY, '
            f'src integer NOT NULL REFERENCES "{schema}".accounts(id), '
            f'dst integer NOT NULL REFERENCES "{schema}".accounts(id), amount bigint NOT NULL, '
            "at timestamptz NOT NULL DEFAULT now(), memo jsonb, ref uuid)"
        )
        conn.execute(
            f'INSERT INTO "{schema}".accounts SELECT g, %s, %s || g, '
            "date '2020-01-01' + g, 100.50 FROM generate_series(1, %s) g",
            (OPENING_BALANCE, "owner-", accounts),
        )
    return OPENING_BALANCE * accounts


def disjoint_ids(uri: str, odd: bool, schema: str = "public") -> None:
    """The ledger's id sequence steps by 2 from 1 (``odd``) or 2: two databases that both
    write transfers (an active-active pair) never hand out the same id, and each row's id
    says which side wrote it. Before the first transfer."""
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_get_serial_sequence(%s, 'id')", (f'"{schema}".transfers',)
        ).fetchone()
        assert row is not None and row[0], "transfers.id has no sequence"
        conn.execute(f"ALTER SEQUENCE {row[0]} INCREMENT BY 2 RESTART WITH {1 if odd else 2}")


@dataclass
class Transfers:
    """Transfers in ``sessions`` concurrent connections until stopped or ``total`` done
    (``rate``: transactions/s over all sessions, 0 as fast as they go). A transfer that
    deadlocks (with another writer of the database: the sink of an active-active pair) is
    run again, as an application would, up to ``RETRIES`` times (counted in ``retried``)."""

    uri: str
    accounts: int
    sessions: int = 4
    total: int = 0
    rate: float = 0.0
    schema: str = "public"
    done: int = 0
    retried: int = 0  # transactions run again after a deadlock
    errors: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _threads: list[threading.Thread] = field(default_factory=list)

    def start(self) -> Transfers:
        for n in range(self.sessions):
            thread = threading.Thread(target=self._session, args=(n,), daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _take(self) -> bool:
        with self._lock:
            if self.stop.is_set() or (self.total and self.done >= self.total):
                return False
            self.done += 1
            return True

    def _session(self, n: int) -> None:
        rng = random.Random(n)
        interval = self.sessions / self.rate if self.rate else 0.0
        accounts = f'"{self.schema}".accounts'
        transfers = f'"{self.schema}".transfers'
        try:
            with psycopg.connect(self.uri, autocommit=True) as conn:
                next_at = time.monotonic()
                while self._take():
                    src, dst = rng.sample(range(1, self.accounts + 1), 2)
                    amount = rng.randint(1, 50)
                    # Rows locked in id order, so concurrent sessions never deadlock.
                    moves = sorted([(src, -amount), (dst, amount)])
                    for attempt in range(RETRIES + 1):
                        try:
                            with conn.transaction():
                                for account, delta in moves:
                                    conn.execute(
                                        f"UPDATE {accounts} SET balance = balance + %s "
                                        "WHERE id = %s",
                                        (delta, account),
                                    )
                                conn.execute(
                                    f"INSERT INTO {transfers} (src, dst, amount, memo, ref) "
                                    "VALUES (%s, %s, %s, %s, gen_random_uuid())",
                                    (src, dst, amount, f'{{"session": {n}}}'),
                                )
                            break
                        except psycopg.errors.DeadlockDetected:
                            if attempt == RETRIES:
                                raise
                            with self._lock:
                                self.retried += 1
                    if interval:
                        next_at += interval
                        time.sleep(max(0.0, next_at - time.monotonic()))
        except psycopg.Error as err:
            self.errors.append(f"session {n}: {err}")


class FollowingTransfers(threading.Thread):
    """An application that follows the primary: transfers in one session against the
    database of the moment (:meth:`move`). A refused write (a freeze, a server gone) makes
    it wait until it is told another primary (or the same one again), as an application
    would wait for its operator. It keeps the ledger id of each transfer it saw commit, by
    the name given with the primary: what each side must hold; and, per name, when its
    first write was refused and its first transfer committed (``time.monotonic()``): how
    long it could not write across a change of primary."""

    REFUSED = (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction)

    def __init__(self, uri: str, schema: str, side: str, accounts: int, pause_s: float = 0.01):
        super().__init__(daemon=True)
        self.primary = (uri, schema, side)
        self.accounts = accounts
        self.pause_s = pause_s
        self.stop = threading.Event()
        self.committed: dict[str, list[int]] = {}
        self.refused = 0
        self.refused_at: dict[str, float] = {}  # side -> its first refused write
        self.first_commit_at: dict[str, float] = {}  # side -> its first transfer committed
        self.errors: list[str] = []

    def move(self, uri: str, schema: str, side: str) -> None:
        self.primary = (uri, schema, side)

    def on(self, side: str) -> list[int]:
        return list(self.committed.get(side, ()))

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            here = self.primary
            try:
                with psycopg.connect(here[0], autocommit=True, connect_timeout=5) as conn:
                    while not self.stop.is_set() and self.primary == here:
                        n += 1
                        self._transfer(conn, here, n)
                        time.sleep(self.pause_s)
            except self.REFUSED:
                self.refused += 1
                self.refused_at.setdefault(here[2], time.monotonic())
                while self.primary == here and not self.stop.is_set():
                    time.sleep(0.1)
            except psycopg.Error as err:
                self.errors.append(str(err))
                return

    def _transfer(self, conn: psycopg.Connection[Any], here: tuple[str, str, str], n: int) -> None:
        schema = here[1]
        src, dst = 1 + n % self.accounts, 1 + (n * 7 + 3) % self.accounts
        if src == dst:
            dst = 1 + dst % self.accounts
        with conn.transaction():
            for account, delta in sorted([(src, -5), (dst, 5)]):
                conn.execute(
                    f'UPDATE "{schema}".accounts SET balance = balance + %s WHERE id = %s',
                    (delta, account),
                )
            row = conn.execute(
                f'INSERT INTO "{schema}".transfers (src, dst, amount, memo, ref) '
                "VALUES (%s, %s, 5, '{}', gen_random_uuid()) RETURNING id",
                (src, dst),
            ).fetchone()
        assert row is not None
        self.first_commit_at.setdefault(here[2], time.monotonic())
        self.committed.setdefault(here[2], []).append(int(row[0]))


@dataclass
class Sample:
    total: int | None  # None: the tables are not there yet
    accounts: int
    transfers: int
    dangling: int  # ledger rows whose account is missing


def sample(conn: psycopg.Connection[Any], schema: str) -> Sample:
    """One consistent read of the target (REPEATABLE READ: one snapshot)."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        try:
            row = conn.execute(f'SELECT sum(balance), count(*) FROM "{schema}".accounts').fetchone()
            ledger = conn.execute(
                f"SELECT count(*), count(*) FILTER (WHERE a.id IS NULL OR b.id IS NULL) "
                f'FROM "{schema}".transfers t LEFT JOIN "{schema}".accounts a ON a.id = t.src '
                f'LEFT JOIN "{schema}".accounts b ON b.id = t.dst'
            ).fetchone()
        except psycopg.errors.UndefinedTable:
            return Sample(None, 0, 0, 0)
    assert row is not None and ledger is not None
    total = int(row[0]) if row[0] is not None else None
    return Sample(total, int(row[1]), int(ledger[0]), int(ledger[1]))


class Sampler(threading.Thread):
    """Samples the target while the feed runs; ``torn`` lists every sample that shows a
    state the source never had (once the accounts are all there)."""

    def __init__(self, uri: str, schema: str, accounts: int, total: int) -> None:
        super().__init__(daemon=True)
        self.uri, self.schema, self.accounts, self.total = uri, schema, accounts, total
        self.samples = 0
        self.transfer_counts: set[int] = set()
        """The numbers of transfers seen on the target: how many of the stream's states
        the samples caught (a run's length changes how many samples it takes)."""
        self.torn: list[str] = []
        self.done = threading.Event()
        self.snapshot_seen = False  # every account has been on the target at once

    def run(self) -> None:
        while not self.done.is_set():
            try:
                with psycopg.connect(self.uri, autocommit=True, connect_timeout=2) as conn:
                    while not self.done.is_set():
                        self._check(sample(conn, self.schema))
                        time.sleep(0.005)
            except psycopg.Error:
                time.sleep(0.2)

    def _check(self, seen: Sample) -> None:
        if seen.total is None or seen.accounts == 0:
            return  # before the snapshot is applied
        if not self.snapshot_seen:
            if seen.accounts < self.accounts and seen.transfers == 0:
                # The snapshot is applied in parts (docs/cdc.md), before any transfer:
                # only the opening accounts, some of them.
                return
            self.snapshot_seen = True
        self.samples += 1
        self.transfer_counts.add(seen.transfers)
        if seen.accounts != self.accounts or seen.total != self.total or seen.dangling:
            self.torn.append(
                f"{seen.accounts} accounts, total {seen.total} (expected {self.total}), "
                f"{seen.dangling} of {seen.transfers} ledger rows without their accounts"
            )

    def stop(self) -> None:
        self.done.set()
        self.join(10)


def rows(uri: str, schema: str, table: str, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Every row of ``table`` (those columns), in primary-key order."""
    names = ", ".join(f'"{c}"' for c in columns)
    with psycopg.connect(uri) as conn:
        try:
            return [
                tuple(r)
                for r in conn.execute(f'SELECT {names} FROM "{schema}"."{table}" ORDER BY 1')
            ]
        except psycopg.errors.UndefinedTable:
            return []


@dataclass
class TableComparison:
    """One table on the source and on the target, row for row."""

    table: str
    source_rows: int
    target_rows: int
    equal: bool
    missing: int  # rows of the source not on the target (or different there)
    extra: int  # rows of the target not on the source
    example: str  # the first differing rows, for the message

    def line(self) -> str:
        if self.equal:
            return f"{self.table}: {self.source_rows:,} rows on each side, equal"
        return (
            f"{self.table}: {self.source_rows:,} rows on the source, {self.target_rows:,} on "
            f"the target ({self.missing:,} missing or different, {self.extra:,} not on the "
            f"source; first {self.example})"
        )


def compare_rows(
    table: str, source: Sequence[tuple[Any, ...]], target: Sequence[tuple[Any, ...]]
) -> TableComparison:
    """Both sides of ``table``, each in primary-key order (as :func:`rows` reads them)."""
    if list(source) == list(target):
        return TableComparison(table, len(source), len(target), True, 0, 0, "")
    # By repr: a row may hold a dict (jsonb), which does not hash.
    theirs, ours = {repr(r): r for r in source}, {repr(r): r for r in target}
    missing = [theirs[k] for k in sorted(theirs.keys() - ours.keys())]
    extra = [ours[k] for k in sorted(ours.keys() - theirs.keys())]
    example = f"{missing[:1]} vs {extra[:1]}"
    return TableComparison(
        table, len(source), len(target), False, len(missing), len(extra), example
    )


def compare(
    source_uri: str, target_uri: str, target_schema: str, source_schema: str = "public"
) -> list[TableComparison]:
    """Both tables of the bank, source against target."""
    return [
        compare_rows(
            table,
            rows(source_uri, source_schema, table, columns),
            rows(target_uri, target_schema, table, columns),
        )
        for table, columns in TABLES.items()
    ]
