"""How the testcontainers backend sets its clusters up (no Docker engine on these
machines: the plan is checked, not run)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support import docker_backend
from tests.support.docker_backend import KafkaPlan

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[3]


def test_the_kafka_is_the_local_stacks_and_the_compose_files() -> None:
    pom = (ROOT / "deploy" / "maven" / "kafka" / "pom.xml").read_text()
    (version,) = re.findall(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert f"apache/kafka:{version}" == docker_backend.KAFKA_IMAGE
    compose = yaml.safe_load((ROOT / "deploy" / "compose" / "docker-compose.yml").read_text())
    assert compose["services"]["kafka-a"]["image"] == docker_backend.KAFKA_IMAGE


def test_the_broker_is_advertised_at_the_fixed_host_port_so_a_restart_keeps_it() -> None:
    plan = KafkaPlan("dc-a", "AAAAAAAAAAAAAAAAAAAAAA", 45123)
    env = plan.env()
    assert plan.bootstrap == "127.0.0.1:45123"
    assert "EXTERNAL://127.0.0.1:45123" in env["KAFKA_ADVERTISED_LISTENERS"]
    assert f"EXTERNAL://:{docker_backend.BROKER_PORT}" in env["KAFKA_LISTENERS"]
    assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"  # KRaft, one node
    assert env["KAFKA_AUTO_CREATE_TOPICS_ENABLE"] == "false"  # like the local stack
    assert env["KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR"] == "1"


def test_only_current_testcontainers_modules_are_used() -> None:
    """Importing the backend warns of nothing deprecated (testcontainers.kafka and
    testcontainers.postgres are deprecated aliases of testcontainers.community.*)."""
    code = "import warnings; warnings.simplefilter('error', DeprecationWarning); " + (
        "import tests.support.docker_backend, tests.support.clusters"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    source = (ROOT / "tests" / "support" / "clusters.py").read_text()
    source += (ROOT / "tests" / "support" / "docker_backend.py").read_text()
    deprecated = re.compile(r"^\s*(from|import) testcontainers\.(kafka|postgres)\b", re.M)
    assert not deprecated.search(source)
    assert "from testcontainers.community.postgres import" in source
