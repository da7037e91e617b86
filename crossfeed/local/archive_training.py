"""Record the class archives of the local stack's JVMs (``crossfeed local archive-classes``).

A broker, a Connect worker and a sorter's Spark driver each start once in a scratch home
on free loopback ports, do a little of their usual work (the broker takes a transaction
and serves it back, the driver reads it through a streaming query), and stop cleanly:
each JVM writes the classes it loaded as it exits (crossfeed/class_archive.py). Only
archives written whole by a JVM that exited on its own are kept.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from crossfeed import class_archive
from crossfeed.kafka import clients
from crossfeed.local import processes
from crossfeed.local.connect import ConnectWorker
from crossfeed.local.kafka import KafkaNode, kafka_classpath

TOPIC = "class-archive-training"
READY = "records-ready"
"""Touched in the recording directory once TOPIC holds its records (the driver waits)."""
START_TIMEOUT_S = 180.0
EXIT_TIMEOUT_S = 180.0  # writing an archive takes seconds; a loaded machine, more


class TrainingError(RuntimeError):
    """A JVM did not start or stop as the training needs; the message says which."""


def record(*, spark: bool) -> list[str]:
    """Record the broker's and Connect's archives, and the Spark driver's when ``spark``;
    returns the kinds now in ``class_archive.directory()``."""
    dest = class_archive.directory()
    dest.mkdir(parents=True, exist_ok=True)
    saved = {k: os.environ.get(k) for k in ("CROSSFEED_HOME", class_archive.RECORD_ENV)}
    with tempfile.TemporaryDirectory(prefix="crossfeed-archives-") as tmp:
        recorded = Path(tmp) / "recorded"
        recorded.mkdir()
        os.environ["CROSSFEED_HOME"] = str(Path(tmp) / "home")
        os.environ[class_archive.RECORD_ENV] = str(recorded)
        try:
            _run_stack(spark, recorded)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        for kind in ("broker", "connect"):
            (recorded / f"{kind}.key").write_text(class_archive.key(kafka_classpath()) + "\n")
        # The Spark driver's key is written by its training run (the sorter's classpath).
        kinds = ["broker", "connect", *(["spark-driver"] if spark else [])]
        for kind in kinds:
            archive = recorded / f"{kind}.jsa"
            if not archive.is_file() or archive.stat().st_size == 0:
                raise TrainingError(f"the {kind} JVM exited without writing {archive.name}")
            shutil.move(str(archive), dest / archive.name)
            shutil.move(str(recorded / f"{kind}.key"), dest / f"{kind}.key")
    return kinds


def _run_stack(spark: bool, recorded: Path) -> None:
    node = KafkaNode("broker", processes.free_port(), processes.free_port())
    node.start()
    worker = driver = None
    try:
        bootstrap = node.bootstrap
        # The driver's JVM starts beside the broker's and waits for READY (its records).
        driver = _start_spark_driver(bootstrap) if spark else None
        _wait(
            lambda: clients.cluster_id({"bootstrap.servers": bootstrap}, 2.0) is not None,
            f"the training broker on {bootstrap}",
            node.log_file,
        )
        _transaction(bootstrap)
        (recorded / READY).touch()
        worker = ConnectWorker(bootstrap, port=processes.free_port(), name="connect")
        worker.start()
        if driver is not None:
            _wait_spark_driver(driver)
        _wait(worker.answers, f"the training Connect worker on {worker.url}", worker.log_file)
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        # SIGTERM: each JVM exits on its own and writes its archive as it goes.
        running = [(node.pid(), "broker")]
        if worker is not None:
            running.append((worker.pid(), "Connect"))
        with ThreadPoolExecutor(max_workers=2) as pool:
            list(pool.map(lambda named: _stop(*named), running))


def _transaction(bootstrap: str) -> None:
    """A transaction of a few records into TOPIC, read back as read_committed."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    cluster = {"bootstrap.servers": bootstrap}
    admin = clients.admin(cluster)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])[TOPIC].result(30)
    producer = clients.transactional_producer(cluster, "class-archive-training")
    producer.begin_transaction()
    for i in range(100):
        producer.produce(TOPIC, key=str(i).encode(), value=b"x" * 100, headers=[("h", b"1")])
    producer.commit_transaction(30)
    consumer = clients.consumer(
        cluster, **{"group.id": "class-archive-training", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([TOPIC])
    got = 0
    deadline = time.monotonic() + 60
    while got < 100 and time.monotonic() < deadline:
        got += len(clients.read_batch(consumer, 100, 1.0))
    consumer.commit(asynchronous=False)
    consumer.close()


def _start_spark_driver(bootstrap: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "crossfeed.services.sorter.archive_training", bootstrap, TOPIC],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_spark_driver(driver: subprocess.Popen[str]) -> None:
    try:
        _, err = driver.communicate(timeout=600)
    except subprocess.TimeoutExpired as expired:
        raise TrainingError("the Spark driver's training run did not end in 600 s") from expired
    if driver.returncode != 0:
        raise TrainingError(
            f"the Spark driver's training run failed (exit {driver.returncode}):\n{err[-4000:]}"
        )


def _wait(check: Callable[[], bool], what: str, log_file: Path) -> None:
    if not processes.wait_until(check, START_TIMEOUT_S, 0.5):
        raise TrainingError(
            f"{what} did not answer within {START_TIMEOUT_S:.0f}s; see its log:\n"
            f"{processes.tail(log_file)}"
        )


def _stop(pid: int | None, what: str) -> None:
    if pid is None:
        raise TrainingError(f"the training {what} was not running when it was to stop")
    processes.terminate(pid, grace_s=EXIT_TIMEOUT_S)
