"""The sorter on a real Spark cluster: a standalone master and one worker (1 core, 2 GiB)
started with pyspark's own ``bin/spark-class`` on 127.0.0.1, the bank workload through
pullers, the sorter (``sorter.spark_master: spark://127.0.0.1:<port>``, its checkpoint
directory on a path the driver and the worker share) and the Kafka sink. Checks what the
local tests check — commit order, whole transactions, nothing missing or twice — and that
the executor, not the driver, read Kafka (Spark's event log names the executor of every
task). Minutes: ``make slow``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from crossfeed.bench.spark_standalone import Standalone
from crossfeed.workload.run import write_transactions
from tests.integration.test_ordered_e2e import TargetWatcher, _all_on_target, _assert_ledger

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.e2e, pytest.mark.slow]

PARTITIONS = 8
# Spark's event log as plain JSON lines (Spark 4 compresses it and rolls it by default)
PLAIN_EVENT_LOG = {"spark.eventLog.compress": "false", "spark.eventLog.rolling.enabled": "false"}


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    cluster = Standalone(tmp_path / "spark")
    (cluster.base / "events").mkdir(parents=True)
    cluster.start()
    yield cluster
    cluster.stop()


def _runs(proc: psutil.Process, script: str = "sorter_main.py") -> bool:
    try:
        return script in " ".join(proc.cmdline())
    except psutil.Error:  # gone, or a zombie
        return False


def _kafka_tasks(events: Path) -> list[dict[str, Any]]:
    """Every finished task of the sorter's application: executor id and records read."""
    out = []
    for log in sorted(p for p in events.rglob("*") if p.is_file()):
        for line in log.read_text(errors="replace").splitlines():
            event = json.loads(line)
            if event.get("Event") == "SparkListenerTaskEnd":
                info, metrics = event["Task Info"], event.get("Task Metrics") or {}
                read = (metrics.get("Input Metrics") or {}).get("Records Read", 0)
                out.append({"executor": info["Executor ID"], "read": read})
    return out


def _start_feed(name, clusters, services, topic_factory, unique, sorter, sorters):
    """An ordered bank feed into Kafka (pullers, ``sorters`` sorters with ``sorter``
    settings, a sink): (feed, its source topic, its target topic)."""
    bank_topic = topic_factory(clusters.a, partitions=PARTITIONS)
    target = unique("ledger")
    feed = services.start_feed(
        name,
        clusters,
        [bank_topic],
        mode="ordered",
        sink_uri=f"kafka://{clusters.b.alias}/{target}",
        pullers=2,
        sorters=sorters,
        sinks=1,
        config={"staging.partitions": 4},
        settings={"puller": {"resolved_interval_ms": 100}, "sorter": sorter},
        timeout=240,
    )
    return feed, bank_topic, target


def _bank(clusters, feed, bank_topic: str, target: str, transfers: int) -> Any:
    """The bank workload through the feed, checked as test_ordered_e2e checks it; its
    summary."""
    watcher = TargetWatcher(clusters.b.config, target)
    watcher.start()
    written: dict[str, Any] = {}

    def workload() -> None:
        written["result"] = write_transactions(
            clusters.a.config,
            bank_topic,
            transfers,
            accounts=200,
            partitions=PARTITIONS,
            skew_partition=3,
            skew_ms=300,
        )

    writer = threading.Thread(target=workload, daemon=True)
    writer.start()
    try:
        summary, balances = _all_on_target(watcher, writer, written, feed)
    finally:
        watcher.stop()
    _assert_ledger(watcher, summary, balances, feed)
    return summary


def _assert_on_the_executor(events: Path) -> list[dict[str, Any]]:
    tasks = _kafka_tasks(events)
    assert tasks, f"no task in Spark's event log under {events}"
    assert {t["executor"] for t in tasks} == {"0"}, "every task ran on the worker's executor"
    return tasks


def test_bank_into_kafka_on_a_standalone_cluster(
    clusters, services, topic_factory, unique, standalone, tmp_path
):
    events = standalone.base / "events"
    sorter_settings = {
        "trigger_interval_ms": 200,
        "spark_master": standalone.url,
        "checkpoint_dir": str(tmp_path / "shared" / "checkpoints"),
        "spark_conf": {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "1g",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": events.as_uri(),
            **PLAIN_EVENT_LOG,
        },
    }
    feed, bank_topic, target = _start_feed(
        "bank-cluster", clusters, services, topic_factory, unique, sorter_settings, 1
    )
    transfers = int(os.environ.get("CROSSFEED_TEST_BANK_TRANSFERS", "20000"))
    summary = _bank(clusters, feed, bank_topic, target, transfers)
    sorter = feed.sorters[0]
    assert sorter.terminate(120) == 0
    stopping = sorter.log_text().rsplit("received SIGTERM", 1)[1]
    assert "Traceback" not in stopping  # a graceful stop is quiet
    tasks = _assert_on_the_executor(events)
    assert sum(t["read"] for t in tasks) >= summary.events  # the Kafka read among them


def _stop_driver(submit: subprocess.Popen[bytes]) -> int:
    """SIGTERM to the driver (crossfeed, the Python child of spark-submit's JVM): it stops
    its query and its SparkContext, and spark-submit exits with its code."""
    drivers = [p for p in psutil.Process(submit.pid).children(recursive=True) if _runs(p)]
    assert drivers, "spark-submit started no Python driver"
    for driver in drivers:
        driver.terminate()
    return submit.wait(120)


def test_bank_into_kafka_with_the_documented_spark_submit(
    clusters, services, topic_factory, unique, standalone, tmp_path
):
    """The README's ``spark-submit`` line (services/sorter/README.md, "Running it on a
    Spark cluster"), with ``--jars`` for ``--packages`` as it says without Maven access."""
    events = standalone.base / "events"
    sorter_settings = {
        "trigger_interval_ms": 200,
        "checkpoint_dir": str(tmp_path / "shared" / "checkpoints"),
    }
    feed, bank_topic, target = _start_feed(
        "bank-submit", clusters, services, topic_factory, unique, sorter_settings, 0
    )
    repo = Path(__file__).resolve().parents[2]
    jars = (repo / ".crossfeed" / "lib" / "spark.classpath").read_text().strip()
    log = tmp_path / "spark-submit.log"
    cmd = [
        str(standalone.home / "bin" / "spark-submit"),
        "--master", standalone.url, "--deploy-mode", "client",
        "--jars", jars,
        "--conf", "spark.executor.instances=4", "--conf", "spark.executor.memory=2g",
        "--conf", f"spark.pyspark.python={sys.executable}",
        "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
        "--conf", "spark.eventLog.enabled=true", "--conf", f"spark.eventLog.dir={events.as_uri()}",
        *(arg for k, v in PLAIN_EVENT_LOG.items() for arg in ("--conf", f"{k}={v}")),
        str(repo / "deploy" / "docker" / "sorter" / "sorter_main.py"),
        "--config", str(feed.config_file),
        "sorter", "run", "--feed", feed.name, "--feed-file", str(feed.feed_file),
    ]  # fmt: skip
    env = {**os.environ, "SPARK_HOME": str(standalone.home), "SPARK_LOCAL_IP": "127.0.0.1"}
    with log.open("wb") as out:
        submit = subprocess.Popen(cmd, env=env, stdout=out, stderr=out, start_new_session=True)
    try:
        _bank(clusters, feed, bank_topic, target, 5000)
        code = _stop_driver(submit)
    finally:
        if submit.poll() is None:
            os.killpg(submit.pid, signal.SIGKILL)
    assert code == 0, log.read_text(errors="replace")[-3000:]
    stopping = log.read_text(errors="replace").rsplit("received SIGTERM", 1)[1]
    assert "Traceback" not in stopping
    _assert_on_the_executor(events)
