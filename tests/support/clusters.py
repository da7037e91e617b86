"""Two real Kafka clusters (and PostgreSQL) for a test session, behind one interface.

Backends, chosen by ``CROSSFEED_TEST_BACKEND`` (``auto`` by default):
- ``local``: the local stack (KRaft JVMs from Maven jars). A stack already answering
  on 19092/29092 is reused and left running; otherwise one is started for the session
  and stopped afterwards.
- ``docker``: testcontainers, where a Docker engine answers (``auto`` picks it only
  when no local stack can be had and an engine answers): the same Kafka image as the
  compose file, a cluster.id per cluster, stop/start of one cluster
  (``docker_backend.py``). These machines have no engine, so it is checked by a unit test
  of what the containers are given, not run here.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from crossfeed.config import Settings
from crossfeed.kafka import clients
from crossfeed.local import stack
from crossfeed.local.postgres import URI as LOCAL_POSTGRES_URI


@dataclass
class Cluster:
    """One cluster as tests see it."""

    alias: str
    bootstrap: str
    cluster_id: str
    properties: dict[str, Any] = field(default_factory=dict)  # security, for a secured one

    @property
    def config(self) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap, **self.properties}


@dataclass
class Clusters:
    a: Cluster
    b: Cluster
    postgres_uri: str | None
    backend: str
    _controls: dict[str, Any] = field(default_factory=dict)

    def by_alias(self, alias: str) -> Cluster:
        return {self.a.alias: self.a, self.b.alias: self.b}[alias]

    def settings(self, **overrides: Any) -> Settings:
        """Settings naming both clusters, as a service under test would load them."""
        data: dict[str, Any] = {
            "clusters": {c.alias: c.config for c in (self.a, self.b)},
            "control_cluster": self.b.alias,
            **overrides,
        }
        if self.postgres_uri:
            data.setdefault("postgres", self.postgres_uri)
        return Settings(**data)

    def stop(self, alias: str, *, hard: bool = True) -> None:
        """Lose a data center (kill -9 with ``hard``); its data is kept."""
        if alias in self._controls:  # a fixture's own node
            self._controls[alias].stop(hard=hard)
        elif self.backend == "docker":
            self._controls["docker"].stop(alias, hard=hard)
        else:
            stack.stop(alias, hard=hard)

    def start(self, alias: str, timeout_s: float = 60.0) -> None:
        """Get it back: same cluster.id, same address, same data."""
        if alias in self._controls:  # a fixture's own node: start it, wait until it answers
            self._controls[alias].start()
            deadline = time.monotonic() + timeout_s
            while clients.cluster_id(self.by_alias(alias).config, 2.0) is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{alias} did not answer again within {timeout_s}s")
        elif self.backend == "docker":
            self._controls["docker"].start(alias)
        else:
            stack.start(alias)


def _docker_answers() -> bool:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env(timeout=2).ping()
        return True
    except Exception:
        return False


@contextmanager
def _local() -> Iterator[Clusters]:
    ids = {c.alias: stack.kafka_cluster_id(c.bootstrap, 2.0) for c in stack.CLUSTERS}
    reuse = all(ids.values()) and stack.Postgres().answers()
    if not reuse:
        ids = stack.up()
    a, b = (Cluster(c.alias, c.bootstrap, ids[c.alias] or "") for c in stack.CLUSTERS)
    try:
        yield Clusters(a, b, LOCAL_POSTGRES_URI, "local")
    finally:
        if not reuse:
            stack.down()


@contextmanager
def _docker() -> Iterator[Clusters]:
    from tests.support.docker_backend import docker_clusters

    with docker_clusters() as (plans, controls, postgres_uri):
        a, b = (Cluster(p.alias, p.bootstrap, p.cluster_id) for p in plans)
        yield Clusters(a, b, postgres_uri, "docker", {"docker": controls})


@contextmanager
def two_clusters() -> Iterator[Clusters]:
    backend = os.environ.get("CROSSFEED_TEST_BACKEND", "auto")
    if backend == "docker" or (backend == "auto" and _local_impossible() and _docker_answers()):
        with _docker() as clusters:
            yield clusters
    else:
        with _local() as clusters:
            yield clusters


def _local_impossible() -> bool:
    from crossfeed import paths

    return not paths.classpath_file("kafka").is_file()
