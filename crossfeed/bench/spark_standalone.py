"""A standalone Spark cluster on this machine: a master and one worker started with pyspark's
own ``bin/spark-class`` on 127.0.0.1 (tests/integration/test_sorter_cluster.py and the
sorter's cluster benchmark, crossfeed/bench/sorter_cluster.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

from crossfeed.local import processes


class Standalone:
    """A standalone master and one worker, each in a process group of its own."""

    def __init__(self, base: Path) -> None:
        import pyspark

        self.home = Path(pyspark.__file__).parent
        self.base = base
        self.port, self.ui_port = processes.free_port(), processes.free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = {
            **os.environ,
            "SPARK_HOME": str(self.home),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(base / "logs"),
            "SPARK_WORKER_DIR": str(base / "work"),
        }

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.base / f"{name}.log").open("wb")
        cmd = [str(self.home / "bin" / "spark-class"), *args]
        self.procs.append(
            subprocess.Popen(cmd, env=self.env, stdout=log, stderr=log, start_new_session=True)
        )

    def start(self) -> None:
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--webui-port", str(self.ui_port),
        )  # fmt: skip
        self._spawn(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1",
            "--webui-port", str(processes.free_port()),
            "--cores", "1",
            "--memory", "2g",
            "--work-dir", str(self.base / "work"),
            self.url,
        )  # fmt: skip
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self.state().get("aliveworkers") == 1:
                return
            time.sleep(1)
        raise AssertionError(f"no worker registered with {self.url}: see {self.base}")

    def state(self) -> dict[str, Any]:
        try:
            url = f"http://127.0.0.1:{self.ui_port}/json/"
            with urllib.request.urlopen(url, timeout=5) as reply:
                return dict(json.load(reply))
        except OSError:
            return {}

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
