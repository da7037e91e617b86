"""A third local cluster with an authorizer, for what only ACLs can show.

One KRaft node like the local stack's (``crossfeed.local.kafka``), plus a SASL/PLAIN
listener and Kafka's StandardAuthorizer. The PLAINTEXT listener's ANONYMOUS principal is
a super user (the controller and the test's own set-up use it); on the SASL listener,
``admin`` is a super user and ``limited`` has only the rights a test grants it.

:func:`secured_pair` gives two more clusters, dc-a and dc-b over SASL_SSL with SCRAM
(``crossfeed.local.secure``), for tests of crossfeed against secured clusters.

Its ports follow the local stack's offset (``CROSSFEED_LOCAL_PORT_OFFSET``), its data
lives in ``$CROSSFEED_HOME/dc-secured``; :func:`secured_cluster` starts it and stops it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from crossfeed import paths
from crossfeed.kafka import clients
from crossfeed.local.kafka import KafkaNode
from crossfeed.local.secure import SecureNode, make_certs
from tests.support.clusters import Cluster, Clusters
from tests.support.services import free_port

ALIAS = "dc-secured"
LIMITED_USER = ("limited", "limited-secret")
ADMIN_USER = ("admin", "admin-secret")


@dataclass(frozen=True)
class SecuredNode(KafkaNode):
    sasl_port: int = 0

    def server_properties(self) -> str:
        replaced = ("listeners=", "advertised.listeners=", "listener.security.protocol.map=")
        base = super().server_properties().splitlines()
        lines = [line for line in base if not line.startswith(replaced)]
        users = " ".join(f'user_{name}="{secret}"' for name, secret in (ADMIN_USER, LIMITED_USER))
        lines += [
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}",
            "listener.security.protocol.map="
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
            "sasl.enabled.mechanisms=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config="
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {users};",
            "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            f"super.users=User:ANONYMOUS;User:{ADMIN_USER[0]}",
            "",
        ]
        return "\n".join(lines)


@dataclass
class Secured:
    node: SecuredNode

    @property
    def superuser(self) -> dict[str, Any]:
        """The PLAINTEXT listener (ANONYMOUS, a super user)."""
        return {"bootstrap.servers": self.node.bootstrap}

    def user(self, name: str, secret: str) -> dict[str, Any]:
        return {
            "bootstrap.servers": f"127.0.0.1:{self.node.sasl_port}",
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": name,
            "sasl.password": secret,
        }

    @property
    def limited(self) -> dict[str, Any]:
        return self.user(*LIMITED_USER)


# Below Linux's ephemeral range (32768-60999): with 3909x, a client connection's source
# port took 39094 once (CI at 9ed26dc) and the node could not bind its SASL listener.
BASE_PORT = 15092


def node() -> SecuredNode:
    port = BASE_PORT + paths.port_offset()
    return SecuredNode(ALIAS, port, port + 1, sasl_port=port + 2)


@contextmanager
def secured_cluster(timeout_s: float = 90.0) -> Iterator[Secured]:
    """Start the secured node (unless it runs), wait until it answers, stop it after."""
    kafka = node()
    started = kafka.pid() is None
    kafka.start()
    try:
        deadline = time.monotonic() + timeout_s
        while clients.cluster_id({"bootstrap.servers": kafka.bootstrap}, 2.0) is None:
            if kafka.pid() is None or time.monotonic() > deadline:
                raise RuntimeError(f"the secured cluster did not come up; see {kafka.log_file}")
            time.sleep(0.5)
        yield Secured(kafka)
    finally:
        if started:
            kafka.stop()


# -- two clusters that speak only SASL_SSL with SCRAM to crossfeed -------------------------

SCRAM_USERS = {"crossfeed": "crossfeed-secret", "app": "app-secret"}
"""``crossfeed`` is what every service and the test use; ``app`` is for a client that
gets its password wrong."""


def secure_nodes(workdir: Path) -> tuple[SecureNode, SecureNode]:
    """dc-a and dc-b as secure nodes whose certificates and data live under ``workdir``
    (fresh for each test session: the SCRAM users are written when storage is formatted).
    Their ports are free ones, not the local stack's plus an offset: several engineers'
    stacks share this machine, and nothing else needs to know these ports in advance."""
    certs = make_certs(workdir / "certs")
    return tuple(  # type: ignore[return-value]
        SecureNode(
            f"secure-{alias}",
            free_port(),
            free_port(),
            secure_port=free_port(),
            certs=certs,
            users=SCRAM_USERS,
            data_dir=workdir / alias,
        )
        for alias in ("dc-a", "dc-b")
    )


@contextmanager
def secured_pair(workdir: Path, timeout_s: float = 90.0) -> Iterator[Clusters]:
    """dc-a and dc-b over SASL_SSL (SCRAM-SHA-512, certificates of a CA made here) as
    :class:`Clusters`: every ``config`` a test or a service gets is the secure one."""
    nodes = secure_nodes(workdir)
    for kafka in nodes:
        kafka.start()
    try:
        handles = []
        for alias, kafka in zip(("dc-a", "dc-b"), nodes, strict=True):
            conf = kafka.client_properties("crossfeed")
            deadline = time.monotonic() + timeout_s
            while (cluster_id := clients.cluster_id(conf, 2.0)) is None:
                if kafka.pid() is None or time.monotonic() > deadline:
                    raise RuntimeError(f"secure {alias} did not come up; see {kafka.log_file}")
                time.sleep(0.5)
            extra = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
            handles.append(Cluster(alias, kafka.secure_bootstrap, cluster_id, extra))
        controls = {"dc-a": nodes[0], "dc-b": nodes[1]}
        yield Clusters(handles[0], handles[1], None, "secured", controls)
    finally:
        for kafka in nodes:
            kafka.stop()
