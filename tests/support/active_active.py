"""Writers for active-active tests: each write's commit time is read back from the database
that made it (``pg_xact_commit_timestamp`` of its transaction), so the expected winner of
every key is computed here, independently of crossfeed.

Two tables on each side: ``items`` (UUID keys, updated, deleted and inserted on both sides
over the same keys) and ``accounts`` (transfers on both sides over the same accounts; its
``balance`` is a counter, so every debit and credit counts).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import psycopg

from crossfeed.pair import sql

OPENING = 1_000


@dataclass(frozen=True)
class Write:
    """One write the test made: the row's values after it (None: a delete)."""

    side: str
    key: str
    value: tuple[Any, ...] | None
    commit_us: int

    def rank(self) -> tuple[int, bytes]:
        """Last writer wins: the later commit, equal ones to the greater side name."""
        return (self.commit_us, self.side.encode())


def create_tables(uri: str, keys: list[str], accounts: int, one_way_before: bool = False) -> None:
    """The two tables with the same opening rows, the pair's hidden columns and triggers,
    and REPLICA IDENTITY FULL on accounts (its balance is a counter). ``one_way_before``:
    items also has the hidden column a one-way CDC feed leaves in the tables it wrote."""
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id uuid PRIMARY KEY, v text NOT NULL, n integer)")
        if one_way_before:
            conn.execute("ALTER TABLE items ADD _crossfeed_commit_ts bigint NOT NULL DEFAULT 0")
        conn.execute("CREATE TABLE accounts (id integer PRIMARY KEY, balance bigint NOT NULL)")
        conn.execute("ALTER TABLE accounts REPLICA IDENTITY FULL")
        for key in keys:
            conn.execute("INSERT INTO items VALUES (%s, 'opening', 0)", (key,))
        conn.execute(
            "INSERT INTO accounts SELECT g, %s FROM generate_series(1, %s) g", (OPENING, accounts)
        )
        for statement in sql.schema_ddl("public"):
            conn.execute(statement)
        for table in ("items", "accounts"):
            for statement in sql.table_ddl("public", table, ["id"]):
                conn.execute(statement)


class Writer(threading.Thread):
    """Writes on one side until stopped: updates, deletes and upserts of ``keys`` (and
    inserts of new UUID keys), and transfers between ``accounts``."""

    def __init__(self, uri: str, side: str, keys: list[str], accounts: int, seed: int) -> None:
        super().__init__(daemon=True, name=f"writer-{side}-{seed}")
        self.uri, self.side, self.keys, self.accounts = uri, side, keys, accounts
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.writes: list[Write] = []
        self.transfers = 0
        self.row_changes = 0  # rows changed here: what this side's Debezium must capture
        self.errors: list[str] = []

    def run(self) -> None:
        try:
            with psycopg.connect(self.uri, autocommit=False) as conn:
                n = 0
                while not self.stop.is_set():
                    n += 1
                    try:
                        if self.random.random() < 0.4:
                            self._transfer(conn)
                        else:
                            self._item(conn, n)
                    except psycopg.errors.DeadlockDetected:
                        conn.rollback()
                    except psycopg.errors.SerializationFailure:
                        conn.rollback()
                    time.sleep(self.random.random() * 0.01)
        except Exception as err:  # reported by the test
            self.errors.append(f"{type(err).__name__}: {err}")

    def _transfer(self, conn: psycopg.Connection[Any]) -> None:
        src, dst = self.random.sample(range(1, self.accounts + 1), 2)
        amount = self.random.randint(1, 50)
        for account, delta in sorted(((src, -amount), (dst, amount))):  # no deadlocks
            conn.execute(
                "UPDATE accounts SET balance = balance + %s WHERE id = %s", (delta, account)
            )
        conn.commit()
        self.transfers += 1
        self.row_changes += 2

    def _item(self, conn: psycopg.Connection[Any], n: int) -> None:
        roll = self.random.random()
        key = self.random.choice(self.keys)
        value: tuple[Any, ...] | None
        if roll < 0.55:
            value = (f"{self.side}-{n}", n)
            done = conn.execute(
                "UPDATE items SET v = %s, n = %s WHERE id = %s", (*value, key)
            ).rowcount
        elif roll < 0.75:
            value = None
            done = conn.execute("DELETE FROM items WHERE id = %s", (key,)).rowcount
        elif roll < 0.9:
            value = (f"{self.side}-{n}-up", n)
            done = conn.execute(
                "INSERT INTO items VALUES (%s, %s, %s) ON CONFLICT (id) DO UPDATE "
                "SET v = excluded.v, n = excluded.n",
                (key, *value),
            ).rowcount
        else:  # a new key of this side's own
            key = str(uuid.uuid4())
            value = (f"{self.side}-{n}-new", n)
            done = conn.execute("INSERT INTO items VALUES (%s, %s, %s)", (key, *value)).rowcount
        row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
        conn.commit()
        if not done:
            return
        assert row is not None
        commit = conn.execute(
            "SELECT (extract(epoch FROM pg_xact_commit_timestamp(%s::xid)) * 1000000)::bigint",
            (row[0],),
        ).fetchone()
        conn.commit()
        assert commit is not None and commit[0] is not None
        self.writes.append(Write(self.side, key, value, int(commit[0])))
        self.row_changes += 1


@dataclass
class Expected:
    """The winner of every key written, computed from the writes alone."""

    rows: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    lost: set[tuple[str, int, str]] = field(default_factory=set)  # (key, commit_us, side)


def expected(writes: list[Write], opening: list[str]) -> Expected:
    by_key: dict[str, list[Write]] = {}
    for write in writes:
        by_key.setdefault(write.key, []).append(write)
    found = Expected()
    for key in opening:
        found.rows[key] = ("opening", 0)
    for key, history in by_key.items():
        winner = max(history, key=Write.rank)
        if winner.value is None:
            found.rows.pop(key, None)
        else:
            found.rows[key] = winner.value
        found.lost |= {(w.key, w.commit_us, w.side) for w in history if w is not winner}
    return found


def items(uri: str) -> dict[str, tuple[Any, ...]]:
    with psycopg.connect(uri) as conn:
        return {str(r[0]): (r[1], r[2]) for r in conn.execute("SELECT id, v, n FROM items")}


def balances(uri: str) -> dict[int, int]:
    with psycopg.connect(uri) as conn:
        return {int(r[0]): int(r[1]) for r in conn.execute("SELECT id, balance FROM accounts")}


def conflicts(uri: str) -> list[tuple[str, str, int, str, int, str]]:
    """(table, key, lost_ts, lost_side, won_ts, won_side) of every conflict recorded."""
    with psycopg.connect(uri) as conn:
        return [
            (r[0], r[1].get("id"), r[2], r[3], r[4], r[5])
            for r in conn.execute(
                "SELECT tbl, key, lost_ts, lost_side, won_ts, won_side FROM crossfeed_conflicts"
            )
        ]
