"""The CDC benchmark's database access: what it reads on a target while a side applies
(when the backlog's ledger rows appear, each later ledger row's commit→visible lag), and
two helpers for the databases each side makes and drops."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import psycopg

from crossfeed.bench.cdc_figures import LagBook

POLL_S = 0.05


def on_server(uri: str, database: str) -> str:
    """``uri`` with its database replaced (same server, user)."""
    return uri.rsplit("/", 1)[0] + f"/{database}"


def execute_quietly(uri: str, sql: str) -> None:
    """For clean-up: a statement whose failure changes nothing for the figures."""
    with contextlib.suppress(psycopg.Error), psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(sql)


def _count(conn: psycopg.Connection[Any], schema: str) -> int:
    try:
        row = conn.execute(f'SELECT count(*) FROM "{schema}".transfers').fetchone()
    except psycopg.errors.UndefinedTable:
        return 0
    return int(row[0]) if row else 0


def wait_transfers(uri: str, schema: str, count: int, timeout_s: float) -> tuple[float, float]:
    """Until ``count`` ledger rows are visible; (first seen, all seen), monotonic. A
    RuntimeError naming how far it got after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    first_at: float | None = None
    seen = 0
    with psycopg.connect(uri, autocommit=True) as conn:
        while time.monotonic() < deadline:
            seen = _count(conn, schema)
            now = time.monotonic()
            if seen and first_at is None:
                first_at = now
            if seen >= count and first_at is not None:
                return first_at, now
            time.sleep(POLL_S)
    raise RuntimeError(f"{seen} of {count} ledger rows visible in {schema} after {timeout_s}s")


def _of_side(parity: int | None) -> str:
    """The ledger rows one side of an active-active pair wrote: its sequence hands out odd
    (``parity`` 1) or even (0) ids (``sql_bank.disjoint_ids``); None: every row."""
    return "" if parity is None else f" AND id %% 2 = {int(parity)}"


def max_id(uri: str, schema: str, parity: int | None = None) -> int:
    with psycopg.connect(uri, autocommit=True) as conn:
        row = conn.execute(
            f'SELECT coalesce(max(id), 0) FROM "{schema}".transfers WHERE true'
            + _of_side(parity).replace("%%", "%")
        ).fetchone()
    return int(row[0]) if row else 0


class LagPoller(threading.Thread):
    """Polls the target for ledger rows above ``after_id`` every 50 ms; each row's lag is
    the poll's time minus its ``at`` (set on the source in its transaction). ``parity``:
    only the other side's rows, where both sides write (odd or even ids)."""

    def __init__(self, uri: str, schema: str, after_id: int, parity: int | None = None) -> None:
        super().__init__(daemon=True)
        self.uri, self.schema, self.parity = uri, schema, parity
        self.book = LagBook(after_id=after_id)
        self.done = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        sql = (
            f'SELECT id, extract(epoch FROM at)::float8 FROM "{self.schema}".transfers '
            "WHERE id > %s" + _of_side(self.parity)
        )
        try:
            with psycopg.connect(self.uri, autocommit=True) as conn:
                while not self.done.is_set():
                    rows = conn.execute(sql, (self.book.floor,)).fetchall()
                    self.book.add([(int(i), float(at)) for i, at in rows], time.time())
                    time.sleep(POLL_S)
        except psycopg.Error as err:
            self.error = f"{type(err).__name__}: {err}"

    def wait_rows(self, rows: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.error is None:
            if len(self.book.seen) >= rows:
                return True
            time.sleep(0.1)
        return len(self.book.seen) >= rows

    def finish(self) -> dict[str, Any]:
        self.done.set()
        self.join(10)
        return self.book.summary() | ({"error": self.error} if self.error else {})
