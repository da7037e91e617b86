"""The capture side for tests: the local stack's source PostgreSQL, its schema registry and
Kafka Connect with Debezium (started for the session unless already running), and per test
a database of its own captured by a connector of its own (its topic prefix, its
replication slot).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from crossfeed.local import captured, postgres, stack
from crossfeed.local.captured import CapturedDatabase


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
        if "registry" in started:
            stack.registry().stop()
        if "postgres-a" in started:
            postgres.source().stop()


@pytest.fixture(scope="module")
def both_sides(clusters: Any) -> Iterator[tuple[str, str]]:
    """Both servers captured (``crossfeed local up --active-active``): postgres-a by Connect
    into dc-a, postgres by Connect-B into dc-b; their Connect URLs. What was started here
    is stopped afterwards."""
    if clusters.backend != "local":
        pytest.skip("both capture sides run in the local stack only")
    started = stack.up_active_active()
    try:
        yield stack.connect_worker().url, stack.connect_worker_b().url
    finally:
        if "connect-b" in started:
            stack.connect_worker_b().stop()
        if "connect" in started:
            stack.connect_worker().stop()
        if "registry" in started:
            stack.registry().stop()
        if "postgres-a" in started:
            postgres.source().stop()


@pytest.fixture
def captured_db(cdc_stack: str) -> Iterator[CapturedDatabase]:
    """A fresh database on the source server, and (once ``register()`` is called) its
    connector; both removed afterwards, with the replication slot."""
    db = captured.create(f"cdc_{uuid.uuid4().hex[:10]}", cdc_stack)
    try:
        yield db
    finally:
        captured.drop(db)
