"""The reference of the disaster-recovery benchmark: PostgreSQL's own logical replication,
failed over and switched over by hand, the steps a user scripts (SQL through psycopg),
timed end to end like crossfeed's commands.

Set-up: ``CREATE PUBLICATION`` of the bank's tables in the source database, ``CREATE
SUBSCRIPTION`` in the target database (``copy_data = true``: the opening accounts come by
the initial copy), until every table is synchronised.

* **Failover** (the source server is gone): ``ALTER SUBSCRIPTION … DISABLE``, ``… SET
  (slot_name = NONE)`` (the slot is on the lost server), ``DROP SUBSCRIPTION``, and the
  ledger's sequence moved past the ids the target holds (logical replication does not
  carry sequences: without it the application's first insert fails on a used id).
* **Switchover**: the source frozen as crossfeed freezes it (``ALTER DATABASE … SET
  default_transaction_read_only = on``, every client session ended:
  ``crossfeed.dr.database.freeze``); wait until the subscription's slot has confirmed the
  source's WAL position taken after the freeze; ``DROP SUBSCRIPTION``; both tables
  compared (count and md5 of the rows in key order: ``crossfeed.dr.database.digest``);
  the sequences set on the target to the source's; the reverse publication on the
  target and the reverse subscription on the source with ``copy_data = false``."""

from __future__ import annotations

import time
from typing import Any

import psycopg
from psycopg import sql

from crossfeed.bench.dr_figures import steps
from crossfeed.bench.dr_stage import TABLES, Stage
from crossfeed.dr import database
from crossfeed.local import postgres

SYNC_TIMEOUT_S = 120.0
DRAIN_TIMEOUT_S = 120.0


def _conninfo(port: int, db: str) -> str:
    return f"host=127.0.0.1 port={port} dbname={db} user={postgres.USER}"


def _tables() -> sql.Composable:
    return sql.SQL(", ").join(sql.Identifier("public", t) for t in TABLES)


class NativeDr:
    name = "native"

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.forward = f"{stage.db}_fwd"
        self.reverse = f"{stage.db}_rev"

    def setup(self) -> None:
        """The publication, the subscription (initial copy), until every table is ready."""
        stage = self.stage
        stage.create(target_accounts=False)
        with psycopg.connect(stage.source_uri, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(self.forward), _tables()
                )
            )
        with psycopg.connect(stage.target_uri, autocommit=True) as conn:
            conn.execute(
                sql.SQL("CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {}").format(
                    sql.Identifier(self.forward),
                    sql.Literal(_conninfo(postgres.SOURCE_PORT, stage.db)),
                    sql.Identifier(self.forward),
                )
            )
            deadline = time.monotonic() + SYNC_TIMEOUT_S
            while True:
                row = conn.execute(
                    "SELECT count(*) FILTER (WHERE srsubstate = 'r'), count(*) "
                    "FROM pg_subscription_rel"
                ).fetchone()
                if row is not None and row[1] == len(TABLES) and row[0] == row[1]:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the subscription's initial copy: {row} tables ready")
                time.sleep(0.2)

    def logs(self) -> str:
        return "the servers' logs (crossfeed local status)"

    def cleanup(self) -> None:
        self.stage.drop()

    def prepare_failover(self) -> None:
        """Nothing: the manual steps need nothing ready."""

    def failover(self) -> dict[str, Any]:
        """The target made writable by hand (the source server is gone)."""
        with database.connect(self.stage.target_uri) as conn:
            name = sql.Identifier(self.forward)
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} DISABLE").format(name))
            conn.execute(sql.SQL("ALTER SUBSCRIPTION {} SET (slot_name = NONE)").format(name))
            conn.execute(sql.SQL("DROP SUBSCRIPTION {}").format(name))
            conn.execute(
                "SELECT setval(pg_get_serial_sequence('public.transfers', 'id'), "
                "greatest(coalesce(max(id), 0), 1)) FROM public.transfers"
            )
        return {"steps": ["disable", "slot_name = NONE", "drop subscription", "setval"]}

    def switchover(self) -> dict[str, Any]:
        """The direction changed by hand (module docstring); each step's seconds."""
        stage = self.stage
        began = time.monotonic()
        marks: list[tuple[str, float]] = []

        def step(label: str) -> None:
            marks.append((label, time.monotonic()))

        with (
            database.connect(stage.source_uri) as source,
            database.connect(stage.target_uri) as target,
        ):
            frozen = database.freeze(source)
            step("freeze")
            self._wait_confirmed(source)
            step("wait for the subscription")
            target.execute(sql.SQL("DROP SUBSCRIPTION {}").format(sql.Identifier(self.forward)))
            step("drop subscription")
            on_source, on_target = database.digests(
                source, "public", target, "public", list(TABLES)
            )
            if on_source != on_target:
                raise RuntimeError(f"the tables differ after the drain: {on_source} {on_target}")
            step("compare")
            database.carry_sequences(source, "public", target, "public", list(TABLES))
            step("sequences")
            target.execute(
                sql.SQL("CREATE PUBLICATION {} FOR TABLE {}").format(
                    sql.Identifier(self.reverse), _tables()
                )
            )
            source.execute(
                sql.SQL(
                    "CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH (copy_data = false)"
                ).format(
                    sql.Identifier(self.reverse),
                    sql.Literal(_conninfo(postgres.PORT, stage.db)),
                    sql.Identifier(self.reverse),
                )
            )
            step("reverse publication and subscription")
        return {"sessions_ended": frozen.sessions_ended, "steps_s": steps(began, marks)}

    def _wait_confirmed(self, source: database.Conn) -> None:
        """Until the subscription's slot on the source has confirmed the source's WAL
        position as of now (everything committed before it is applied on the target)."""
        row = source.execute("SELECT pg_current_wal_lsn()").fetchone()
        assert row is not None
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:
            done = source.execute(
                "SELECT confirmed_flush_lsn >= %s::pg_lsn FROM pg_replication_slots "
                "WHERE slot_name = %s",
                (row[0], self.forward),
            ).fetchone()
            if done is not None and done[0]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the subscription did not reach {row[0]} on the source")
            time.sleep(0.05)

    def reverse_applies(self, timeout_s: float = 30.0) -> bool | None:
        """After a switchover: whether the application's transfers on the new primary
        reach the old one through the reverse subscription."""
        app = self.stage.app
        if app is None or not app.on("target"):
            return None
        wanted = set(app.on("target")[:20])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with psycopg.connect(self.stage.source_uri, autocommit=True) as conn:
                there = {
                    int(i)
                    for (i,) in conn.execute(
                        "SELECT id FROM public.transfers WHERE id = ANY(%s)", (list(wanted),)
                    )
                }
            if there == wanted:
                return True
            time.sleep(0.5)
        return False
