"""The local stack's schema registry: Apicurio Registry (``crossfeed local up --cdc``), for
Debezium in Avro. One Java process on 127.0.0.1:18081 (plus the port offset) with in-memory
storage, its Confluent-compatible API at ``/apis/ccompat/v7``, its own at
``/apis/registry/v2``; log in ``.crossfeed/registry/``. ``make setup`` unpacks the
application (a Quarkus runner jar and its ``lib/``) into ``.crossfeed/lib/apicurio-registry/``.

In-memory storage: the registry forgets every schema when it stops, and Connect registers
them again with the next event of each table (new ids, so records written before cannot be
read after a restart of the local registry: a production registry keeps its storage).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from crossfeed import paths
from crossfeed.local import processes
from crossfeed.local.kafka import SetupMissing

PORT = 18081 + paths.port_offset()
CCOMPAT_PATH = "/apis/ccompat/v7"
NATIVE_PATH = "/apis/registry/v2"
HEAP = "-Xms64m -Xmx256m"


def app_dir() -> Path:
    """Where ``make setup`` unpacked the registry application."""
    return paths.lib_dir("apicurio.stamp") / "apicurio-registry"


def runner_jar() -> Path:
    found = sorted(app_dir().glob("apicurio-registry-app-*-runner.jar"))
    if not found:
        raise SetupMissing(f"Apicurio Registry is not in {app_dir()}: run 'make setup'")
    return found[-1]


@dataclass(frozen=True)
class Registry:
    """A local Apicurio Registry; its files are in ``.crossfeed/<name>/``."""

    port: int = PORT
    name: str = "registry"

    @property
    def url(self) -> str:
        """The Confluent-compatible API: what Confluent's clients and crossfeed use."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT_PATH}"

    @property
    def native_url(self) -> str:
        """Apicurio's own API: what its Connect converter uses."""
        return f"http://127.0.0.1:{self.port}{NATIVE_PATH}"

    @property
    def dir(self) -> Path:
        return paths.home() / self.name

    @property
    def log_file(self) -> Path:
        return self.dir / "registry.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "registry.pid"

    def pid(self) -> int | None:
        return processes.running_pid(self.pid_file, f"-Dcrossfeed.home={self.dir}")

    def command(self) -> list[str]:
        return [
            "java",
            *HEAP.split(),
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # starts faster; it serves a handful of schemas
            f"-Dcrossfeed.home={self.dir}",  # marks the process as this stack's
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.log.console.color=false",
            "-Dquarkus.banner.enabled=false",
            # Confluent's wire format names a schema by the id the ccompat API gives it,
            # which is Apicurio's content id (the converter writes that id too).
            "-Dregistry.ccompat.legacy-id-mode.enabled=false",
            "-jar",
            str(runner_jar()),
        ]

    def start(self) -> int:
        """Start the registry in the background (no wait); returns its pid."""
        existing = self.pid()
        if existing:
            return existing
        command = self.command()
        self.dir.mkdir(parents=True, exist_ok=True)
        processes.rotate(self.log_file)
        return processes.spawn(command, self.log_file, self.pid_file, dict(os.environ))

    def stop(self, *, hard: bool = False) -> bool:
        return processes.stop(self.pid(), hard=hard)

    def answers(self) -> bool:
        """The Confluent-compatible API lists its subjects."""
        try:
            with urllib.request.urlopen(self.url + "/subjects", timeout=2.0) as answer:
                return isinstance(json.loads(answer.read()), list)
        except (urllib.error.URLError, OSError, ValueError):
            return False
