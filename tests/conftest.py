"""Session fixtures: two real clusters, factories for topics, producers and consumers."""

from __future__ import annotations

# First, before anything reads the local stack's ports: under pytest-xdist each worker gets
# a stack of its own (tests/support/worker_stack.py).
from tests.support import worker_stack

# isort: split

import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer

from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from tests.support.cdc import both_sides, captured_db, cdc_stack  # noqa: F401  (fixtures)
from tests.support.clusters import Cluster, Clusters, two_clusters
from tests.support.secured import secure, secure_home  # noqa: F401  (fixtures)
from tests.support.services import services  # noqa: F401  (fixture)


@pytest.fixture(scope="session")
def clusters() -> Iterator[Clusters]:
    """dc-a and dc-b, real brokers (reused if already running)."""
    with two_clusters() as handles:
        yield handles


@pytest.fixture
def unique(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Names unique to this test run: ``unique("orders")`` -> ``orders-test-name-1a2b3c``."""
    stem = re.sub(r"[^a-zA-Z0-9.-]", "-", request.node.name)[:60]
    suffix = uuid.uuid4().hex[:6]
    return lambda base: f"{base}-{stem}-{suffix}"


TopicFactory = Callable[..., str]


@pytest.fixture
def topic_factory(clusters: Clusters, unique: Callable[[str], str]) -> TopicFactory:
    """Create a topic: ``topic_factory(clusters.a, partitions=6, config={...}, name=None)``."""

    created: list[None] = []

    def create(
        cluster: Cluster,
        *,
        partitions: int = 1,
        config: dict[str, str] | None = None,
        name: str | None = None,
    ) -> str:
        created.append(None)
        topic = name or f"{unique('t')}-{len(created)}"
        # ensure_topic returns once the metadata lists the topic: a producer that asks
        # sooner is told it does not exist (seen under load)
        kafka_topics.ensure_topic(clients.admin(cluster.config), topic, partitions, config)
        return topic

    return create


@pytest.fixture
def producer_factory() -> Iterator[Callable[..., Producer]]:
    made: list[Producer] = []

    def create(cluster: Cluster, **conf: Any) -> Producer:
        producer = clients.producer(cluster.config, **conf)
        made.append(producer)
        return producer

    yield create
    for producer in made:
        producer.flush(10)


@pytest.fixture
def consumer_factory(unique: Callable[[str], str]) -> Iterator[Callable[..., Consumer]]:
    made: list[Consumer] = []

    def create(cluster: Cluster, **conf: Any) -> Consumer:
        conf.setdefault("group.id", unique("g"))
        consumer = clients.consumer(cluster.config, **conf)
        made.append(consumer)
        return consumer

    yield create
    for consumer in made:
        consumer.close()


@pytest.fixture
def postgres(clusters: Clusters, unique: Callable[[str], str]) -> Iterator[Any]:
    """A psycopg connection with its own fresh schema (search_path set to it)."""
    import psycopg

    if not clusters.postgres_uri:
        pytest.skip("no PostgreSQL in this backend")
    schema = unique("s").replace("-", "_").replace(".", "_").lower()[:60]
    with psycopg.connect(clusters.postgres_uri, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        conn.execute(f'SET search_path TO "{schema}"')
        try:
            yield conn
        finally:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    worker_stack.schedule(items)


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist: absent under -p no:xdist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (make test): whole groups of files per worker."""
    if config.getvalue("dist") == "loadgroup":
        return worker_stack.FileGroups(config, log)
    return None
