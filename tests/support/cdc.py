"""The capture side for tests: the local stack's source PostgreSQL and Kafka Connect with
Debezium (started for the session unless already running), and per test a database of
its own captured by a connector of its own (its topic prefix, its replication slot).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.local import postgres, stack


@dataclass
class CapturedDatabase:
    """A source database and the Debezium connector capturing it."""

    name: str  # the database's and the connector's name
    prefix: str  # topic prefix
    uri: str  # the source database
    connect_url: str

    @property
    def topics(self) -> str:
        """The feed's topic pattern: every table of schema public."""
        return rf"{self.prefix}\.public\..*"

    def register(self, **options: Any) -> None:
        config = connector.connector_config(self.uri, self.prefix, **options)
        connector.register(self.connect_url, self.name, config)

    def wait_running(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            with contextlib.suppress(ConnectError):
                last = connector.status(self.connect_url, self.name)
                tasks = last.get("tasks", [])
                if tasks and all(t.get("state") == "RUNNING" for t in tasks):
                    return
                if any(t.get("state") == "FAILED" for t in tasks):
                    raise AssertionError(f"connector {self.name} failed: {last}")
            time.sleep(0.5)
        raise AssertionError(f"connector {self.name} not running within {timeout}s: {last}")


@pytest.fixture(scope="session")
def cdc_stack(clusters: Any) -> Iterator[str]:
    """The Connect worker's REST URL, with the source PostgreSQL answering."""
    if clusters.backend != "local":
        pytest.skip("the capture side runs in the local stack only")
    started = stack.up_cdc()
    try:
        yield stack.connect_worker().url
    finally:
        if "connect" in started:
            stack.connect_worker().stop()
        if "postgres-a" in started:
            postgres.source().stop()


@pytest.fixture
def captured_db(cdc_stack: str) -> Iterator[CapturedDatabase]:
    """A fresh database on the source server, and (once ``register()`` is called) its
    connector; both removed afterwards, with the replication slot."""
    name = f"cdc_{uuid.uuid4().hex[:10]}"
    admin_uri = postgres.source().uri.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    db = CapturedDatabase(name, name, admin_uri.rsplit("/", 1)[0] + f"/{name}", cdc_stack)
    try:
        yield db
    finally:
        with contextlib.suppress(ConnectError):
            connector.remove(cdc_stack, name)
        _drop(admin_uri, name)


def _drop(admin_uri: str, name: str) -> None:
    slot = f"crossfeed_{name}"
    deadline = time.monotonic() + 30
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        while time.monotonic() < deadline:
            try:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                    "WHERE slot_name = %s",
                    (slot,),
                )
                break
            except psycopg.errors.ObjectInUse:  # the connector's task is still stopping
                time.sleep(0.5)
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
