"""dc-a and dc-b secured, as ``crossfeed local up --secure`` gives them: the one fixture
for tests of crossfeed against secured clusters — SASL_SSL with SCRAM-SHA-512 on both,
certificates of a CA made for the run, Kafka's StandardAuthorizer (the ``crossfeed``
user is a super user; any other user has only what an ACL grants it).

The pair is started by the command itself, under a home of the test session's own
(``CROSSFEED_HOME``), so a developer's stack and configuration are left alone; each
cluster's properties are read back from the configuration file the command wrote, its
``${file:}`` password reference resolved as every crossfeed process resolves it. The
ports follow the local stack's offset (``CROSSFEED_LOCAL_PORT_OFFSET``): 19094 and 29094
plus the offset.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from crossfeed.config import load_settings
from crossfeed.kafka import clients
from crossfeed.local.secure import SecureStack
from tests.support.cli import run_crossfeed
from tests.support.clusters import Cluster, Clusters


@contextmanager
def secured_pair(home: Path, timeout_s: float = 180.0) -> Iterator[Clusters]:
    """``crossfeed local up --secure --no-postgres`` under ``home``, as :class:`Clusters`
    whose ``config`` is what a crossfeed process gets from the written configuration;
    ``crossfeed local down`` afterwards."""
    home.mkdir(parents=True, exist_ok=True)
    try:
        started = run_crossfeed(
            home, "local", "up", "--secure", "--no-postgres", timeout_s=timeout_s
        )
        if started.returncode != 0:
            raise RuntimeError(
                f"crossfeed local up --secure failed ({started.returncode}):\n"
                f"{started.stdout}{started.stderr}"
            )
        settings = load_settings(home / "local.yaml")
        handles = []
        for alias in ("dc-a", "dc-b"):
            conf = settings.cluster(alias).client_config()
            cluster_id = clients.cluster_id(conf, 10.0)
            if cluster_id is None:
                raise RuntimeError(f"secure {alias} does not answer: {started.stdout}")
            extra = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
            handles.append(Cluster(alias, str(conf["bootstrap.servers"]), cluster_id, extra))
        controls = {node.alias: node for node in SecureStack(home / "secure").nodes()}
        yield Clusters(handles[0], handles[1], None, "secured", controls)
    finally:
        run_crossfeed(home, "local", "down", timeout_s=timeout_s)


@pytest.fixture(scope="session")
def secure_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``CROSSFEED_HOME`` of the secured pair (its local.yaml, certificates, data)."""
    return tmp_path_factory.mktemp("secured")


@pytest.fixture(scope="session")
def secure(secure_home: Path) -> Iterator[Clusters]:
    """The secured dc-a and dc-b, for the whole session (started on first use)."""
    with secured_pair(secure_home) as pair:
        yield pair


def add_user(cluster: Cluster, name: str, password: str) -> dict[str, Any]:
    """A SCRAM user of ``cluster`` (created by its super user); its client properties."""
    admin = clients.admin(cluster.config)
    credential = UserScramCredentialUpsertion(
        name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), password.encode()
    )
    for future in admin.alter_user_scram_credentials([credential]).values():
        future.result(30)
    return {**cluster.config, "sasl.username": name, "sasl.password": password}
