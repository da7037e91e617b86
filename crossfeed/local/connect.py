"""The local stack's Kafka Connect workers: ``crossfeed local up --cdc`` starts one writing
to dc-a (REST 127.0.0.1:18083), ``--active-active`` a second one writing to dc-b (REST
127.0.0.1:28083, its own group and its own config/offset/status topics, log in
``.crossfeed/connect-b/``). Each runs in distributed mode, REST on 127.0.0.1 only, with the
Debezium PostgreSQL connector and Apicurio Registry's Avro converter in its ``plugin.path``,
and the config providers ``env`` and ``dir`` that a connector's password references are
read with (crossfeed/cdc/connector.py: password_reference). Connect itself (connect-runtime,
connect-json) is on the Kafka classpath ``make setup`` resolves; the Debezium plugin's
jars are ``.crossfeed/lib/debezium/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from crossfeed import paths
from crossfeed.cdc.connect_api import ConnectError, request
from crossfeed.cdc.connector import WORKER_CONFIG_PROVIDERS
from crossfeed.local import processes
from crossfeed.local.kafka import LOG4J2_PROPERTIES, SetupMissing, java_command

REST_PORT = 18083 + paths.port_offset()
GROUP_ID = "crossfeed-connect"
# Connect's own topics on dc-a (one partition each is plenty for one worker).
CONFIG_TOPIC = "_connect.configs"
OFFSET_TOPIC = "_connect.offsets"
STATUS_TOPIC = "_connect.status"
# The dc-b worker (--active-active): names of its own, so a mirror feed of dc-a's topics
# into dc-b never mixes the two workers' state.
REST_PORT_B = 28083 + paths.port_offset()
GROUP_ID_B = "crossfeed-connect-b"
TOPICS_B = "_connect-b"


def plugin_dir() -> Path:
    """The worker's ``plugin.path``: one folder per plugin in it (Connect treats a jar at
    its top as a plugin of its own), the Debezium connector's ``make setup`` resolved."""
    return paths.lib_dir("debezium.stamp") / "debezium"


SERVICE_MANIFESTS = "apicurio-converter/crossfeed-service-manifests.jar"
"""What ``make setup`` adds beside Apicurio's converter: its ServiceLoader manifest."""


def discovery() -> list[str]:
    """``plugin.discovery=service_load`` once every plugin has a ServiceLoader manifest
    (Debezium's jars carry theirs, ``make setup`` writes the converter's): the worker then
    skips the reflective scan of every plugin jar (17-97 s per start on a loaded machine,
    0.8 s by ServiceLoader). Without the manifest (an older setup) Connect's default scan stays."""
    return ["plugin.discovery=service_load"] if (plugin_dir() / SERVICE_MANIFESTS).exists() else []


@dataclass(frozen=True)
class ConnectWorker:
    """One Connect worker whose Kafka cluster is ``bootstrap``; its files are in
    ``.crossfeed/<name>/``, its own topics ``<topics>.configs|offsets|status``."""

    bootstrap: str
    port: int = REST_PORT
    name: str = "connect"
    group_id: str = GROUP_ID
    topics: str = "_connect"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def dir(self) -> Path:
        return paths.home() / self.name

    @property
    def log_file(self) -> Path:
        return self.dir / "connect.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "connect.pid"

    @property
    def properties_file(self) -> Path:
        return self.dir / "connect-distributed.properties"

    def pid(self) -> int | None:
        return processes.running_pid(self.pid_file, str(self.properties_file))

    def properties(self) -> str:
        return "\n".join(
            [
                f"bootstrap.servers={self.bootstrap}",
                f"group.id={self.group_id}",
                f"config.storage.topic={self.topics}.configs",
                f"offset.storage.topic={self.topics}.offsets",
                f"status.storage.topic={self.topics}.status",
                "config.storage.replication.factor=1",
                "offset.storage.replication.factor=1",
                "offset.storage.partitions=1",
                "status.storage.replication.factor=1",
                "status.storage.partitions=1",
                # JSON with schemas: no schema registry is needed (or served here).
                "key.converter=org.apache.kafka.connect.json.JsonConverter",
                "value.converter=org.apache.kafka.connect.json.JsonConverter",
                "key.converter.schemas.enable=true",
                "value.converter.schemas.enable=true",
                # Source offsets flushed often: after a crash Debezium re-sends less.
                "offset.flush.interval.ms=1000",
                # One worker: when it loses its cluster (dc-a killed) and joins again, its
                # connectors come back at once, not after the 5-minute default meant for
                # a worker of many that may return.
                "scheduled.rebalance.max.delay.ms=3000",
                f"listeners=http://127.0.0.1:{self.port}",
                "rest.advertised.host.name=127.0.0.1",
                f"rest.advertised.port={self.port}",
                f"plugin.path={plugin_dir()}",
                *discovery(),
                "topic.creation.enable=true",
                # ${env:NAME} and ${dir:DIR:FILE} in a connector's config: read by the worker
                *(f"{k}={v}" for k, v in WORKER_CONFIG_PROVIDERS.items()),
                "",
            ]
        )

    def start(self) -> int:
        """Start the worker in the background (no wait); returns its pid."""
        existing = self.pid()
        if existing:
            return existing
        if not any(plugin_dir().glob("*/debezium-connector-postgres-*.jar")):
            raise SetupMissing(
                f"the Debezium PostgreSQL connector is not in {plugin_dir()}: run 'make setup'"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(self.properties())
        (self.dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        cmd = java_command(
            "connect",
            self.dir / "log4j2.properties",
            "org.apache.kafka.connect.cli.ConnectDistributed",
            str(self.properties_file),
        )
        processes.rotate(self.log_file)
        return processes.spawn(cmd, self.log_file, self.pid_file, dict(os.environ))

    def stop(self, *, hard: bool = False) -> bool:
        return processes.stop(self.pid(), hard=hard)

    def answers(self) -> bool:
        """The REST API lists the Debezium PostgreSQL connector among its plugins."""
        try:
            plugins = request(self.url, "GET", "/connector-plugins")
        except ConnectError:
            return False
        return any(p.get("class", "").endswith("PostgresConnector") for p in plugins)

    def has_avro_converter(self) -> bool:
        """Apicurio's Avro converter is in the worker's ``plugin.path``."""
        return any(plugin_dir().glob("apicurio-converter/apicurio-registry-utils-converter-*.jar"))
