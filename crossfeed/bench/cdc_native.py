"""The reference side of the CDC benchmark: PostgreSQL's own logical replication
between the same two instances (``CREATE PUBLICATION`` on a database of the source
server, ``CREATE SUBSCRIPTION`` in a database of its own on the target server).
Transaction-atomic and in commit order, no Kafka in between: the physical best case.

The subscription is created disabled and without copying data (the target's tables are
made by the same DDL, with the same opening accounts), so the backlog written after it
waits in its replication slot and is applied as transactions once it is enabled."""

from __future__ import annotations

import time
import uuid

import psycopg

from crossfeed.bench.cdc_watch import execute_quietly
from crossfeed.bench.cdc_watch import on_server as _server
from crossfeed.local import postgres
from crossfeed.workload import sql_bank


class NativeSide:
    name = "native"

    def __init__(self) -> None:
        self.db = f"bench_native_{uuid.uuid4().hex[:6]}"
        self.source_uri = _server(postgres.SOURCE_URI, self.db)
        self.target_uri = _server(postgres.URI, self.db)
        self.schema = "public"
        self.pids: dict[str, int] = {}

    def prepare(self, accounts: int) -> int:
        """Both databases with the bank's tables, a publication, a disabled subscription;
        returns the total balance."""
        for server in (postgres.SOURCE_URI, postgres.URI):
            with psycopg.connect(_server(server, "postgres"), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.db}"')
        total = sql_bank.create(self.source_uri, accounts)
        sql_bank.create(self.target_uri, accounts)
        with psycopg.connect(self.source_uri, autocommit=True) as conn:
            conn.execute(f'CREATE PUBLICATION "{self.db}" FOR TABLE accounts, transfers')
        with psycopg.connect(self.target_uri, autocommit=True) as conn:
            conn.execute(
                f'CREATE SUBSCRIPTION "{self.db}" CONNECTION '
                f"'host=127.0.0.1 port={postgres.SOURCE_PORT} dbname={self.db} "
                f"user={postgres.USER}' PUBLICATION {self.db} "
                "WITH (enabled = false, copy_data = false)"
            )
        return total

    def capture_pids(self) -> dict[str, int]:
        return {}  # nothing runs before the subscription is enabled

    def after_backlog(self, transfers: int) -> dict[str, float]:
        return {}  # the backlog waits in the slot

    def start(self) -> dict[str, int]:
        """Enable the subscription; the walsender (source) and apply worker (target)."""
        with psycopg.connect(self.target_uri, autocommit=True) as conn:
            conn.execute(f'ALTER SUBSCRIPTION "{self.db}" ENABLE')
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(self.pids) < 2:
            with psycopg.connect(self.target_uri, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pid FROM pg_stat_subscription WHERE subname = %s AND relid IS NULL",
                    (self.db,),
                ).fetchone()
                if row and row[0]:
                    self.pids["apply worker"] = int(row[0])
            with psycopg.connect(self.source_uri, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT pid FROM pg_stat_replication WHERE application_name = %s", (self.db,)
                ).fetchone()
                if row and row[0]:
                    self.pids["walsender"] = int(row[0])
            time.sleep(0.05)
        return dict(self.pids)

    def logs(self) -> str:
        return "the target PostgreSQL's log (crossfeed local status)"

    def cleanup(self) -> None:
        execute_quietly(self.target_uri, f'DROP SUBSCRIPTION IF EXISTS "{self.db}"')
        for server in (postgres.URI, postgres.SOURCE_URI):
            drop = f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)'
            execute_quietly(_server(server, "postgres"), drop)
