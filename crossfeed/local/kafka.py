"""One single-node KRaft cluster (broker and controller in one JVM) from Maven jars."""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

from crossfeed import class_archive, paths
from crossfeed.local import processes

HEAP = os.environ.get("CROSSFEED_KAFKA_HEAP", "-Xms256m -Xmx1g")
JVM_OPTIONS = os.environ.get("CROSSFEED_KAFKA_JVM_OPTIONS", "")
"""More options for the local brokers' and Connect's JVMs (make test holds their JIT to
its first tier: for a test's short, light runs compiling less costs less than it saves)."""

LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.log.name = kafka.log
logger.log.level = WARN
logger.storage.name = org.apache.kafka.storage
logger.storage.level = WARN
"""


class SetupMissing(RuntimeError):
    """The JVM classpath has not been resolved yet."""


def kafka_classpath() -> str:
    """The broker/tools/MirrorMaker classpath ``make setup`` resolved from Maven Central."""
    path = paths.classpath_file("kafka")
    if not path.is_file():
        raise SetupMissing(f"{path} is missing: run 'make setup' (resolves the Kafka jars)")
    return path.read_text().strip()


def java_command(
    kind: str, log4j: Path, main_class: str, *args: str, jvm_options: tuple[str, ...] = ()
) -> list[str]:
    """A JVM of the local stack on the Kafka classpath (``kind``: a ``broker``, the
    ``connect`` worker), with its class archive when ``make setup`` recorded one."""
    classpath = kafka_classpath()
    return [
        "java",
        *HEAP.split(),
        "-XX:+UseG1GC",
        *class_archive.jvm_options(kind, classpath),
        *jvm_options,
        *JVM_OPTIONS.split(),
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        classpath,
        main_class,
        *args,
    ]


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True)
class KafkaNode:
    """A local cluster: its alias, client port and controller port."""

    alias: str
    port: int
    controller_port: int

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def dir(self) -> Path:
        return paths.home() / self.alias

    @property
    def log_file(self) -> Path:
        return self.dir / "kafka.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "kafka.pid"

    @property
    def properties_file(self) -> Path:
        return self.dir / "server.properties"

    @property
    def cluster_id_file(self) -> Path:
        return self.dir / "cluster.id"

    def pid(self) -> int | None:
        return processes.running_pid(self.pid_file, str(self.properties_file))

    def server_properties(self) -> str:
        data = self.dir / "data"
        return "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.bootstrap.servers=127.0.0.1:{self.controller_port}",
                f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
                f"CONTROLLER://127.0.0.1:{self.controller_port}",
                f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={data}",
                "num.partitions=1",
                "auto.create.topics.enable=false",
                # A single node: internal topics cannot have more than one replica.
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=10",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "transaction.state.log.num.partitions=10",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                # A broker restarted after kill -9 is unfenced once its old registration's
                # session expires: 9 s by default, the most of a restart's wait here.
                "broker.session.timeout.ms=4000",
                "broker.heartbeat.interval.ms=1000",
                # The lone controller writes a no-op to its log when idle (every 500 ms by
                # default); an idle broker's CPU is a third lower at 5 s.
                "metadata.max.idle.interval.ms=5000",
                # Tests and benchmarks write a lot; keep disk use and recovery short.
                "log.segment.bytes=268435456",
                "log.retention.bytes=4294967296",
                "",
            ]
        )

    def format_args(self) -> list[str]:
        """Extra arguments for the storage format (a secured node adds its SCRAM users)."""
        return []

    def prepare(self) -> str:
        """Write config and format storage once; returns this cluster's id."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.properties_file.write_text(self.server_properties())
        (self.dir / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
        if (self.dir / "data" / "meta.properties").exists() and self.cluster_id_file.exists():
            return self.cluster_id_file.read_text().strip()
        cluster_id = new_cluster_id()
        result = subprocess.run(
            [
                "java",
                "-cp",
                kafka_classpath(),
                f"-Dlog4j2.configurationFile={self.dir / 'log4j2.properties'}",
                "kafka.tools.StorageTool",
                "format",
                # "=" form: an id may start with "-", which argparse would take for a flag
                f"--cluster-id={cluster_id}",
                "-c",
                str(self.properties_file),
                "--standalone",
                *self.format_args(),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"formatting {self.alias} failed (exit {result.returncode}):\n"
                f"{result.stdout}{result.stderr}"
            )
        self.cluster_id_file.write_text(cluster_id)
        return cluster_id

    def start(self) -> int:
        """Start the JVM in the background (no wait); returns its pid."""
        existing = self.pid()
        if existing:
            return existing
        self.prepare()
        cmd = java_command(
            "broker",
            self.dir / "log4j2.properties",
            "kafka.Kafka",
            str(self.properties_file),
            jvm_options=("-XX:MaxGCPauseMillis=20",),
        )
        processes.rotate(self.log_file)
        return processes.spawn(cmd, self.log_file, self.pid_file, dict(os.environ))

    def stop(self, *, hard: bool = False) -> bool:
        """Stop the broker; ``hard`` is kill -9 (losing a data center). True if it ran."""
        return processes.stop(self.pid(), hard=hard)
