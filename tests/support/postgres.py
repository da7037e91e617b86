"""PostgreSQL as a reader of an ordered feed's target sees it (for tests)."""

from __future__ import annotations

import threading
import time

import psycopg

from crossfeed.local import processes
from crossfeed.local.postgres import Postgres


class Sampler(threading.Thread):
    """A separate connection sampling SELECT sum(balance) while the feed runs."""

    def __init__(self, uri: str, schema: str) -> None:
        super().__init__(daemon=True)
        self.uri, self.schema = uri, schema
        self.sums: list[int | None] = []
        self.errors = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                with psycopg.connect(self.uri, autocommit=True, connect_timeout=2) as conn:
                    while not self.done.is_set():
                        try:
                            row = conn.execute(
                                f'SELECT sum(balance) FROM "{self.schema}".accounts'
                            ).fetchone()
                            self.sums.append(int(row[0]) if row and row[0] is not None else None)
                        except psycopg.errors.UndefinedTable:
                            self.sums.append(None)
                        time.sleep(0.002)
            except psycopg.OperationalError:
                self.errors += 1
                time.sleep(0.2)


def drop_schema_after_restarts(uri: str, schema: str) -> None:
    """Teardown of a test that restarts PostgreSQL: bring it back if the test left it
    stopped (start is idempotent), then drop the test's schema."""
    pg = Postgres()
    pg.start()
    processes.wait_until(pg.answers, 30)
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
