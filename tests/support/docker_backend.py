"""The testcontainers backend (``CROSSFEED_TEST_BACKEND=docker``): two Kafka clusters and
PostgreSQL in containers, for machines with a Docker engine and no local stack.

It mirrors the local stack where it matters to crossfeed:

- each cluster has its own ``cluster.id`` — crossfeed takes a cluster.id as a data
  center's identity (provenance headers, loop prevention, offset syncs), so two clusters
  sharing one (testcontainers' KafkaContainer formats every cluster with the same fixed
  id) would look like one data center;
- the same Kafka as the local stack and the compose file: the ``apache/kafka`` image at
  ``kafka.version`` of deploy/maven/kafka/pom.xml, one KRaft node (broker + controller);
- a cluster can be stopped and started again (same container, same data, same host
  port, so the same bootstrap address), which the failover and outage tests need.

What a container is given is a plain :class:`KafkaPlan` (no Docker involved), so a unit
test checks it on machines without an engine; :func:`start_kafka` applies it. The
modules used are testcontainers' current ones (``core``, ``community.postgres``), not
the deprecated ``testcontainers.kafka``/``testcontainers.postgres`` aliases.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from testcontainers.community.postgres import PostgresContainer
from testcontainers.core.container import DockerContainer

from crossfeed.kafka import clients
from crossfeed.local.kafka import new_cluster_id

KAFKA_IMAGE = "apache/kafka:4.3.1"
"""= kafka.version of deploy/maven/kafka/pom.xml and the compose file's image."""
POSTGRES_IMAGE = "postgres:17"
BROKER_PORT = 9092  # inside the container: clients (advertised as the host's port)
INTERNAL_PORT = 19092  # inside the container: between the broker and itself
CONTROLLER_PORT = 9093
START_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class KafkaPlan:
    """One single-node KRaft cluster's container: image, id, ports, environment."""

    alias: str
    cluster_id: str
    host_port: int
    image: str = KAFKA_IMAGE

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.host_port}"

    def env(self) -> dict[str, str]:
        # The advertised address is the host's fixed port: it survives a stop/start, and
        # clients outside the container reach it as they would the local stack.
        return {
            "CLUSTER_ID": self.cluster_id,
            "KAFKA_NODE_ID": "1",
            "KAFKA_PROCESS_ROLES": "broker,controller",
            "KAFKA_CONTROLLER_QUORUM_VOTERS": f"1@localhost:{CONTROLLER_PORT}",
            "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
            "KAFKA_LISTENERS": f"EXTERNAL://:{BROKER_PORT},INTERNAL://:{INTERNAL_PORT},"
            f"CONTROLLER://:{CONTROLLER_PORT}",
            "KAFKA_ADVERTISED_LISTENERS": f"EXTERNAL://{self.bootstrap},"
            f"INTERNAL://localhost:{INTERNAL_PORT}",
            "KAFKA_INTER_BROKER_LISTENER_NAME": "INTERNAL",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
            "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
            "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
            "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
            "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
            "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
            "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
            "KAFKA_HEAP_OPTS": "-Xms256m -Xmx1g",
        }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def plans(aliases: tuple[str, ...] = ("dc-a", "dc-b")) -> list[KafkaPlan]:
    """One plan per alias, each with a cluster id of its own and a free host port."""
    return [KafkaPlan(alias, new_cluster_id(), free_port()) for alias in aliases]


def wait_answering(plan: KafkaPlan, timeout_s: float = START_TIMEOUT_S) -> str:
    """The cluster's id once a metadata request is answered."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = clients.cluster_id({"bootstrap.servers": plan.bootstrap}, 2.0)
        if found:
            return found
        time.sleep(0.5)
    raise TimeoutError(f"{plan.alias} ({plan.image}) did not answer at {plan.bootstrap}")


def start_kafka(plan: KafkaPlan) -> DockerContainer:
    container = DockerContainer(plan.image).with_bind_ports(BROKER_PORT, plan.host_port)
    for key, value in plan.env().items():
        container = container.with_env(key, value)
    container.start()
    found = wait_answering(plan)
    if found != plan.cluster_id:  # the image must have used the id it was given
        raise RuntimeError(f"{plan.alias}: cluster.id {found}, expected {plan.cluster_id}")
    return container


class Controls:
    """Stop and start one cluster's container, like ``crossfeed local stop|start``."""

    def __init__(self, plans: list[KafkaPlan], containers: list[DockerContainer]) -> None:
        self.by_alias = {p.alias: (p, c) for p, c in zip(plans, containers, strict=True)}

    def stop(self, alias: str, *, hard: bool = True) -> None:
        _, container = self.by_alias[alias]
        container.get_wrapped_container().stop(timeout=0 if hard else 10)

    def start(self, alias: str) -> None:
        plan, container = self.by_alias[alias]
        container.get_wrapped_container().start()
        wait_answering(plan)


@contextmanager
def docker_clusters() -> Iterator[tuple[list[KafkaPlan], Controls, str]]:
    """Both clusters and PostgreSQL running: (plans, controls, PostgreSQL URI)."""
    with ExitStack() as stack:
        planned = plans()
        containers: list[Any] = []
        for plan in planned:
            container = start_kafka(plan)
            stack.callback(container.stop)
            containers.append(container)
        pg = stack.enter_context(PostgresContainer(POSTGRES_IMAGE, driver=None))
        yield planned, Controls(planned, containers), pg.get_connection_url()
