"""What every scenario of the disaster-recovery benchmark stands on: a database of its own
on each PostgreSQL server of the ``local up --active-active`` stack (the source on
postgres-a, the target on the dc-b side's server), the SQL bank's tables in both, and the
application: ``sql_bank.FollowingTransfers``, one session writing transfers to the primary
of the moment, which keeps the ledger id of every transfer it saw commit and, per
primary, when its first write was refused and its first transfer committed.

Losing the source is ``pg_ctl stop -m immediate`` of postgres-a (every process quits at
once, as in a crash), and kill -9 of dc-a's broker when its Kafka is lost too; both are
started again before the next scenario."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import psycopg

from crossfeed.bench.cdc_watch import on_server
from crossfeed.bench.cleanup import Janitor
from crossfeed.local import captured, postgres, stack
from crossfeed.workload import sql_bank
from crossfeed.workload.sql_bank import FollowingTransfers

ACCOUNTS = 200
PAUSE_S = 0.02  # between the application's transfers: a steady ~30-40 transfers/s
WARM_TRANSFERS = 100  # on the target before anything happens: the feed is running
STEADY_S = 5.0  # then this long at the steady rate, so the feed lags as it does
TABLES = ("accounts", "transfers")
SOURCE_SERVER = "postgres-a"
SOURCE_KAFKA = "dc-a"

Say = Callable[[str], None]


def source_server() -> postgres.Postgres:
    return postgres.source(active_active=True)


def lose_source(janitor: Janitor) -> float:
    """postgres-a stopped as if it crashed; the seconds it took."""
    server = source_server()
    janitor.restart_later(SOURCE_SERVER, lambda: restore_source(janitor))
    began = time.monotonic()
    server.stop(hard=True)
    return round(time.monotonic() - began, 3)


def restore_source(janitor: Janitor, timeout_s: float = 120.0) -> None:
    """postgres-a started again (it recovers from its WAL), once it answers."""
    server = source_server()
    server.start()
    deadline = time.monotonic() + timeout_s
    while not server.answers():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{SOURCE_SERVER} does not answer after a restart")
        time.sleep(0.5)
    janitor.restarted(SOURCE_SERVER)


def lose_source_kafka(janitor: Janitor) -> float:
    """dc-a's broker killed (kill -9); the seconds until its process was gone."""
    janitor.restart_later(SOURCE_KAFKA, lambda: stack.start(SOURCE_KAFKA))
    began = time.monotonic()
    stack.stop(SOURCE_KAFKA, hard=True)
    return round(time.monotonic() - began, 3)


def restore_source_kafka(janitor: Janitor) -> None:
    """dc-a started again, and Connect-A (its own topics are on dc-a) restarted."""
    stack.start(SOURCE_KAFKA)
    janitor.restarted(SOURCE_KAFKA)
    stack.restart_connect(hard=True, side=SOURCE_KAFKA)


class Stage:
    """One scenario's two databases and its application."""

    def __init__(self, name: str) -> None:
        self.db = name
        self.source_uri = on_server(postgres.SOURCE_URI, name)
        self.target_uri = on_server(postgres.URI, name)
        self.app: FollowingTransfers | None = None
        self.started_at = 0.0

    def create(self, *, target_accounts: bool = True) -> None:
        """The bank's tables on both servers with the same opening accounts (or, with
        ``target_accounts`` false, none on the target: a subscription copies them)."""
        for server in (postgres.SOURCE_URI, postgres.URI):
            with psycopg.connect(on_server(server, "postgres"), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.db}"')
        sql_bank.create(self.source_uri, ACCOUNTS)
        sql_bank.create(self.target_uri, ACCOUNTS if target_accounts else 0)

    def start_app(self) -> None:
        self.app = FollowingTransfers(self.source_uri, "public", "source", ACCOUNTS, PAUSE_S)
        self.started_at = time.monotonic()
        self.app.start()

    def steady(self, logs: Callable[[], str], timeout_s: float = 600.0) -> None:
        """Until the target holds :data:`WARM_TRANSFERS`, then :data:`STEADY_S` more."""
        deadline = time.monotonic() + timeout_s
        while len(self.held()) < WARM_TRANSFERS:
            self._check_app()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{len(self.held())} of {WARM_TRANSFERS} transfers on the target after "
                    f"{timeout_s:.0f}s (logs: {logs()})"
                )
            time.sleep(0.5)
        time.sleep(STEADY_S)
        self._check_app()

    def _check_app(self) -> None:
        app = self._app()
        if app.errors:
            raise RuntimeError(f"the application failed: {app.errors[:2]}")

    def _app(self) -> FollowingTransfers:
        if self.app is None:
            raise RuntimeError("the application was not started")
        return self.app

    def committed_on_source(self) -> list[int]:
        return self._app().on("source")

    def move(self) -> None:
        """The application is told the new primary."""
        self._app().move(self.target_uri, "public", "target")

    def first_commit_on_target(self, timeout_s: float = 120.0) -> float | None:
        """When the application's first transfer committed on the target (None: not within
        ``timeout_s``)."""
        app = self._app()
        deadline = time.monotonic() + timeout_s
        while "target" not in app.first_commit_at:
            if app.errors or not app.is_alive() or time.monotonic() > deadline:
                return None
            time.sleep(0.01)
        return app.first_commit_at["target"]

    def refused_on_source(self) -> float | None:
        return self._app().refused_at.get("source")

    def held(self) -> list[int]:
        """The ledger ids the target holds."""
        with psycopg.connect(self.target_uri, autocommit=True, connect_timeout=5) as conn:
            return [int(i) for (i,) in conn.execute("SELECT id FROM public.transfers")]

    def writing_s(self, until: float) -> float:
        return max(until - self.started_at, 1e-3)

    def stop_app(self) -> None:
        if self.app is not None:
            self.app.stop.set()
            self.app.join(30)

    def drop(self) -> None:
        """Both databases, with the subscriptions and replication slots in them (a
        database with a slot cannot be dropped). Each subscription is cut from its slot
        first, so dropping it needs nothing of the other server."""
        self.stop_app()
        for server in (postgres.SOURCE_URI, postgres.URI):
            with contextlib.suppress(psycopg.Error):
                self._drop_on(server)

    def _drop_on(self, server: str) -> None:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(on_server(server, self.db), autocommit=True, connect_timeout=5) as conn,
        ):
            conn.execute("SET default_transaction_read_only = off")  # a frozen source
            names = conn.execute(
                "SELECT subname FROM pg_subscription s JOIN pg_database d "
                "ON d.oid = s.subdbid WHERE d.datname = current_database()"
            ).fetchall()
            for (name,) in names:
                conn.execute(f'ALTER SUBSCRIPTION "{name}" DISABLE')
                conn.execute(f'ALTER SUBSCRIPTION "{name}" SET (slot_name = NONE)')
                conn.execute(f'DROP SUBSCRIPTION "{name}"')
        with psycopg.connect(on_server(server, "postgres"), autocommit=True) as admin:
            slots = admin.execute(
                "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (self.db,)
            ).fetchall()
            captured.drop_slots(admin, [str(s) for (s,) in slots], timeout_s=60)
            admin.execute(f'DROP DATABASE IF EXISTS "{self.db}" WITH (FORCE)')
