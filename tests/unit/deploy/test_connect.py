"""deploy/: Kafka Connect with Debezium (compose profile `cdc`, deploy/k8s/connect.yaml,
image target `connect`) set up as the local stack's worker is: its plugins from the poms
`make setup` resolves, on the plugin.path its properties name, and a connector's password
read by reference through the same config providers."""

from __future__ import annotations

import pytest
import yaml

from crossfeed.cdc.connector import WORKER_CONFIG_PROVIDERS
from tests.support.deploy_files import (
    COMPOSE_DIR,
    ROOT,
    compose_env,
    compose_mounts,
    compose_services,
    configmap,
    dockerfile,
)

pytestmark = pytest.mark.unit

PROPERTIES = "/etc/kafka-connect/connect-distributed.properties"


def _properties(text: str) -> dict[str, str]:
    pairs = (
        line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#")
    )
    return {k.strip(): v.strip() for k, v in pairs}


def _worker_agrees(props: dict[str, str]) -> None:
    for key, value in WORKER_CONFIG_PROVIDERS.items():
        assert props.get(key) == value, key
    stages = dockerfile()
    plugins = [dest for _, dest, src in stages["connect"].copies if src == "connect-plugins"]
    assert plugins and props["plugin.path"] == plugins[0].rstrip("/")
    assert stages["connect"].cmd and stages["connect"].cmd[-1] == PROPERTIES


def test_the_image_takes_its_plugins_from_the_poms_make_setup_resolves():
    stage = dockerfile()["connect-plugins"]
    poms = {source for sources, _, _ in stage.copies for source in sources}
    assert poms == {"deploy/maven/debezium/pom.xml", "deploy/maven/apicurio-converter/pom.xml"}
    setup = (ROOT / "deploy" / "local" / "setup.sh").read_text()
    assert all(pom in setup for pom in poms)
    assert dockerfile()["connect"].base.startswith("apache/kafka:")


def test_the_compose_worker_reads_kafka_a_and_passwords_by_reference():
    services = compose_services()
    connect = services["connect-a"]
    props = _properties(compose_mounts(connect)[PROPERTIES].read_text())
    _worker_agrees(props)
    host, port = props["bootstrap.servers"].split(":")
    assert f"://:{port}" in compose_env(services[host])["KAFKA_LISTENERS"]
    assert "POSTGRES_A_PASSWORD" in compose_env(connect)  # what the example's ${env:...} reads
    assert "wal_level=logical" in services["postgres-a"]["command"]
    assert set(connect["profiles"]) == set(services["postgres-a"]["profiles"]) == {"cdc"}
    compose = yaml.safe_load((COMPOSE_DIR / "docker-compose.yml").read_text())
    assert "postgres-a-data" in compose["volumes"]


def test_the_kubernetes_worker_reads_dc_a_as_crossfeed_does():
    props = _properties(configmap("crossfeed-connect-dc-a")["connect-distributed.properties"])
    _worker_agrees(props)
    crossfeed = yaml.safe_load(configmap("crossfeed-config")["crossfeed.yaml"])
    assert props["bootstrap.servers"] == crossfeed["dc-a.bootstrap.servers"]
