"""A database of its own on the local stack's source PostgreSQL, captured by a Debezium
connector of its own (its topic prefix, its replication slot): what ``crossfeed demo
--cdc`` and the CDC tests create, and remove with :func:`drop` afterwards."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import psycopg

from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.local import postgres


@dataclass
class CapturedDatabase:
    """A source database and the Debezium connector capturing it."""

    name: str  # the database's and the connector's name
    prefix: str  # topic prefix
    uri: str  # the source database
    connect_url: str
    admin_uri: str = ""  # its server's maintenance database (default: the source server's)

    def register(self, **options: Any) -> None:
        config = connector.connector_config(self.uri, self.prefix, **options)
        connector.register(self.connect_url, self.name, config)

    def wait_running(self, timeout: float = 90.0) -> None:
        """Until the connector's task runs; RuntimeError if it failed, TimeoutError."""
        connector.wait_running(self.connect_url, self.name, timeout)

    @property
    def topics(self) -> str:
        """The feed's topic pattern: every table of schema public."""
        return rf"{self.prefix}\.public\..*"

    @property
    def slot(self) -> str:
        return str(connector.connector_config(self.uri, self.prefix)["slot.name"])


def create(
    name: str, connect_url: str, server: postgres.Postgres | None = None
) -> CapturedDatabase:
    """A fresh database ``name`` on the source server (or ``server``: an active-active
    pair's other side), its connector, registered later with ``register()`` on the Connect
    cluster at ``connect_url``, named and prefixed ``name`` too."""
    server = server or postgres.source()
    uri = server.create_database(name)
    return CapturedDatabase(name, name, uri, connect_url, server.database_uri("postgres"))


def drop(db: CapturedDatabase) -> None:
    """Remove the connector, its replication slot and the database."""
    _remove_connector(db)
    with psycopg.connect(
        db.admin_uri or postgres.source().database_uri("postgres"), autocommit=True
    ) as conn:
        drop_slots(conn, [db.slot])
        conn.execute(f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)')


def _remove_connector(db: CapturedDatabase, timeout_s: float = 120.0) -> None:
    """Remove the connector, waiting for a Connect worker that is (re)starting: a connector
    left behind would retry against a database that is gone, for ever."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            connector.remove(db.connect_url, db.name)
            return
        except ConnectError as err:
            # Connect's own "Connector NAME not found", not the 404 of a worker whose REST
            # resources are not up yet
            if "HTTP 404: Connector" in str(err) or time.monotonic() > deadline:
                return
            time.sleep(1.0)


def drop_origins(conn: psycopg.Connection[Any], names: list[str], timeout_s: float = 30.0) -> None:
    """Drop those of the replication origins ``names`` that exist (a sink's, once it has
    stopped: each holds one of the server's max_replication_slots states until dropped)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            conn.execute(
                "SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin "
                "WHERE roname = ANY(%s)",
                (names,),
            )
            return
        except psycopg.errors.ObjectInUse:  # the sink's session is still ending
            time.sleep(0.5)


def drop_slots(conn: psycopg.Connection[Any], slots: list[str], timeout_s: float = 30.0) -> None:
    """Drop those of ``slots`` that exist, waiting while a removed connector's task still
    holds one."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                "WHERE slot_name = ANY(%s)",
                (slots,),
            )
            return
        except psycopg.errors.ObjectInUse:  # the connector's task is still stopping
            time.sleep(0.5)
