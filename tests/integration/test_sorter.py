"""The sorter against real brokers and a real Spark (docs/ordered-feeds.md §2-§3).

Changes are written straight into ``_crossfeed.<feed>.changes`` in the puller's format
(tests/support/changes.py), over 8 source partitions staged in 4 partitions, with one
partition late; the sorter runs as a process (``crossfeed sorter run``), one Spark start
per test.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from crossfeed import dlq
from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.wire import headers
from tests.support.changes import (
    Change,
    ChangesWriter,
    check_sorted,
    read_all,
    transactions_workload,
    write_round,
)
from tests.support.clusters import Clusters
from tests.support.services import ServiceFactory, ServiceProcess

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(900)]

SOURCE_PARTITIONS = 8
STAGING_PARTITIONS = 4


@dataclass
class SorterFeed:
    name: str
    source_topic: str
    writer: ChangesWriter
    sorter: ServiceProcess
    clusters: Clusters

    @property
    def sorted_topic(self) -> str:
        return f"_crossfeed.{self.name}.sorted"

    def read_sorted(self) -> list[Any]:
        consumer = clients.consumer(self.clusters.b.config, **{"group.id": f"t-{uuid.uuid4()}"})
        try:
            return read_all(consumer, self.sorted_topic)
        finally:
            consumer.close()

    def wait_resolved(self, ts: int, timeout: float = 300.0) -> dict[str, Any]:
        return self.sorter.wait_status(
            lambda s: (s.get("resolved_ts_us") or -1) >= ts, timeout, f"resolved_ts >= {ts}"
        )


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceFactory]:
    made = ServiceFactory(tmp_path_factory.mktemp("sorter"))
    yield made
    made.close()


def start_sorter(
    clusters: Clusters,
    factory: ServiceFactory,
    stem: str,
    driver_release_rows: int = 20_000,
    **sorter_settings: Any,
) -> SorterFeed:
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    source_topic = f"{name}-src"
    kafka_topics.ensure_topic(clients.admin(clusters.a.config), source_topic, SOURCE_PARTITIONS)
    changes = f"_crossfeed.{name}.changes"
    kafka_topics.ensure_topic(clients.admin(clusters.b.config), changes, STAGING_PARTITIONS)
    workdir = factory.base_dir / name
    workdir.mkdir()
    feed_file = workdir / "feed.yaml"
    feed_file.write_text(
        f"name: {name}\nsource: {clusters.a.alias}\n"
        f"sink-uri: kafka://{clusters.b.alias}/{name}-out\n"
        f"topics: [{source_topic}]\nmode: ordered\n"
    )
    config = factory.write_config(
        clusters,
        workdir / "crossfeed.yaml",
        control_cluster=clusters.b.alias,
        settings={
            "sorter": {
                "checkpoint_dir": str(workdir / "checkpoints"),
                "trigger_interval_ms": 200,
                "laggard_after_s": 2,
                "partitions_refresh_s": 2,
                "max_segments": 2,  # compaction runs while a partition holds R back
                "max_offsets_per_trigger": 20_000,
                # 0: every batch through Spark's jobs (segments, sort, Kafka writer)
                "driver_release_rows": driver_release_rows,
                **sorter_settings,
            }
        },
    )
    sorter = ServiceProcess(
        "sorter", feed=name, feed_file=feed_file, config_file=config, workdir=workdir
    )
    factory.track(sorter)
    sorter.start()
    sorter.wait_ready(120)
    producer = clients.producer(clusters.b.config)
    return SorterFeed(
        name,
        source_topic,
        ChangesWriter(producer, changes, STAGING_PARTITIONS, clusters.a.cluster_id),
        sorter,
        clusters,
    )


def _dead_letters(clusters: Clusters, feed: str) -> list[Any]:
    consumer = clients.consumer(clusters.b.config, **{"group.id": f"t-{uuid.uuid4()}"})
    try:
        return [
            m
            for m in read_all(consumer, "_crossfeed.dlq")
            if dict(m.headers() or []).get(dlq.FEED) == feed.encode()
        ]
    finally:
        consumer.close()


def _expected(work: Any) -> list[tuple[int, str, list[bytes]]]:
    out = []
    for txn_id, changes in work.txns.items():
        ordered = sorted(changes, key=lambda c: c.seq)
        out.append((ordered[0].commit_ts, txn_id, [c.value for c in ordered]))
    return sorted(out)


# driver: every release in the driver; parts: releases over 100 changes in several parts
# (the held-back partition's catch-up); spark: every batch through Spark's jobs
@pytest.mark.parametrize(
    ("path", "driver_rows"), [("driver", 20_000), ("parts", 100), ("spark", 0)]
)
def test_skewed_partition_holds_the_feed_back_then_all_in_commit_order(
    clusters: Clusters, factory: ServiceFactory, path: str, driver_rows: int
) -> None:
    feed = start_sorter(clusters, factory, f"sorter-skew-{path}", driver_release_rows=driver_rows)
    late = 5
    work = transactions_workload(feed.source_topic, SOURCE_PARTITIONS, 300, 6, seed=11)
    held: list[Change] = []
    for i in range(5):
        held += write_round(feed.writer, work, i, hold=late)
        feed.writer.flush()
        # a micro-batch per round: segments pile up and get compacted
        feed.sorter.wait_status(
            lambda s, i=i: (s["last_batch"] or {}).get("batch_id", -1) >= i,
            120,
            f"batch {i} done",
        )
        if i == 1:
            # two of three changes of a transaction: incomplete once R passes it
            for seq in (1, 2):
                feed.writer.data(
                    Change(
                        feed.source_topic,
                        0,
                        work.round_ts[2],
                        "zz-incomplete",
                        seq,
                        3,
                        b"k",
                        b"lost",
                        work.round_ts[2] // 1000,
                    )
                )
    feed.writer.flush()

    def round_4_read(s: dict[str, Any]) -> bool:
        parts = s["partitions"]
        return all(
            (parts.get(f"{feed.source_topic}/{p}") or {}).get("resolved_ts_us") == work.round_ts[4]
            for p in range(SOURCE_PARTITIONS)
            if p != late
        )

    # the late partition has sent nothing: nothing is released, and it is the laggard
    # (once the sorter has read round 4: a round may span micro-batches)
    status = feed.sorter.wait_status(
        lambda s: (
            any(lag["partition"] == f"{feed.source_topic}/{late}" for lag in s["laggards"])
            and s["last_batch"] is not None
            and s["pending_events"] > 0
            and round_4_read(s)
        ),
        120,
        "the late partition reported as laggard",
    )
    assert status["resolved_ts_us"] is None
    assert status["pending_segments"] <= 2  # compacted (max_segments)
    assert "compacted" in feed.sorter.log_text()
    assert status["holding_back"] == [f"{feed.source_topic}/{late}"]
    assert all(
        status["partitions"][f"{feed.source_topic}/{p}"]["resolved_ts_us"] == work.round_ts[4]
        for p in range(SOURCE_PARTITIONS)
        if p != late
    )
    deadline = time.monotonic() + 30  # the gauges follow /status within a second or so
    labels = {"topic": feed.source_topic, "partition": str(late)}
    while (feed.sorter.metric("crossfeed_sorter_laggard_seconds", labels) or 0) < 2:
        assert time.monotonic() < deadline, feed.sorter.metrics()
        time.sleep(0.5)
    assert feed.read_sorted() == []

    # the late partition catches up; the last round completes the workload
    for change in held:
        feed.writer.data(change)
    feed.writer.mark(feed.source_topic, late, work.round_ts[4])
    write_round(feed.writer, work, 5)
    feed.writer.flush()
    status = feed.wait_resolved(work.round_ts[5])
    # every partition is at the same resolved_ts now (this writer sends no more marks,
    # so after laggard_after_s they all count as laggards, as a stopped puller would)
    assert len(status["holding_back"]) == SOURCE_PARTITIONS

    result = check_sorted(feed.read_sorted())
    assert result.replays == 0 and result.cut_short == 0
    assert result.txns == _expected(work)
    assert result.resolved[-1] == work.round_ts[5]
    letters = _dead_letters(clusters, feed.name)
    assert len(letters) == 2
    for msg in letters:
        h = dict(msg.headers())
        assert h[dlq.STAGE] == b"sorter"
        assert h[dlq.ERROR_CLASS] == b"IncompleteTransaction"
        assert h[headers.TXN].startswith(b"zz-incomplete/")
        assert msg.value() == b"lost"
    metric = feed.sorter.metric("crossfeed_sorter_events_released_total", {"feed": feed.name})
    assert metric == sum(len(c) for c in work.txns.values())

    # SIGTERM: the query stops, the process exits 0 and takes its JVM with it
    children = psutil.Process(feed.sorter.pid).children(recursive=True)
    assert feed.sorter.terminate(60) == 0
    _gone, alive = psutil.wait_procs(children, timeout=30)
    assert not alive, f"left behind: {alive}"


def test_kill_9_mid_run_and_restart_loses_nothing(
    clusters: Clusters, factory: ServiceFactory
) -> None:
    feed = start_sorter(clusters, factory, "sorter-kill")
    # rounds big enough that a release and its write take a while to be caught in
    work = transactions_workload(feed.source_topic, SOURCE_PARTITIONS, 6000, 12, seed=5)
    done = threading.Event()

    def produce() -> None:
        for i in range(1, len(work.rounds)):
            time.sleep(0.5)
            write_round(feed.writer, work, i)
            feed.writer.flush()
        done.set()

    # The first round released before the others are written: a sorter slow to start
    # (CI) once found every round waiting and released them all in one batch, with no
    # later release to kill.
    write_round(feed.writer, work, 0)
    feed.writer.flush()
    feed.sorter.wait_status(
        lambda s: (s.get("resolved_ts_us") or -1) >= work.round_ts[0], 300, "a first release"
    )
    jvm = psutil.Process(feed.sorter.pid).children(recursive=True)  # before: no time lost
    writer = threading.Thread(target=produce, daemon=True)
    writer.start()
    # kill -9 in the middle of writing a release, after a first one, while changes keep
    # coming: Spark replays that batch on restart. A release and its write take ~60 ms
    # here, so the status is read often.
    status = feed.sorter.wait_status(
        lambda s: (s["current_batch"] or {}).get("step") == "release",
        120,
        "a batch writing its release after a first release",
        every=0.01,
    )
    killed_batch = status["current_batch"]["batch_id"]
    feed.sorter.kill()
    psutil.wait_procs(jvm, timeout=30)  # the JVM follows its Python driver
    time.sleep(2)
    feed.sorter.start()
    writer.join(120)
    assert done.is_set()
    feed.wait_resolved(work.round_ts[-1])

    result = check_sorted(feed.read_sorted())
    # replays (a batch written twice) are dropped by position, as a sink drops them
    assert result.txns == _expected(work)
    assert result.resolved[-1] == work.round_ts[-1]
    assert _dead_letters(clusters, feed.name) == []
    # the killed batch ran again after the restart (Spark's offsets log)
    restarted = feed.sorter.log_text().split("start #2")[1]
    assert f"batch {killed_batch}:" in restarted
    assert feed.sorter.terminate(60) == 0
    stopping = feed.sorter.log_text().rsplit("received SIGTERM", 1)[1]
    assert "Traceback" not in stopping  # a graceful stop is quiet (py4j's included)


def test_a_quiet_feed_pauses_between_batches_until_a_change_arrives(
    clusters: Clusters, factory: ServiceFactory
) -> None:
    """Marks alone, nothing pending: the sorter waits (sorter.quiet_pause_ms) before its
    next batch instead of taking one per commit of marks; the first change ends the wait
    at once, and what the pause held back is all read then."""
    pause_s = 240  # far longer than any wait below: only a change can end it
    feed = start_sorter(
        clusters,
        factory,
        "sorter-quiet",
        quiet_pause_ms=pause_s * 1000,
        laggard_after_s=2 * pause_s,
    )
    base = int(time.time() * 1e6)

    def marks(ts: int) -> None:
        for p in range(SOURCE_PARTITIONS):
            feed.writer.mark(feed.source_topic, p, ts)
        feed.writer.flush()

    marks(base)
    status = feed.sorter.wait_status(
        lambda s: (
            (s["current_batch"] or {}).get("step") == "quiet"
            and (s.get("resolved_ts_us") or -1) >= base
        ),
        300,
        "the sorter pausing after a batch of marks",
    )
    paused_batch = status["current_batch"]["batch_id"]
    # Marks keep coming, as pullers commit them: no batch reads them during the pause.
    for i in range(1, 21):
        marks(base + i * 1000)
        time.sleep(0.25)
    status = feed.sorter.status()
    assert status is not None
    assert (status["current_batch"] or {}).get("batch_id") == paused_batch
    assert status["resolved_ts_us"] == base

    # A change ends the pause: it is released (with its marks) long before the pause is up.
    change_ts = base + 30_000
    began = time.monotonic()
    feed.writer.data(
        Change(feed.source_topic, 3, change_ts, "t-quiet", 1, 1, b"k", b"v", change_ts // 1000)
    )
    marks(change_ts)
    feed.wait_resolved(change_ts, timeout=pause_s / 2)
    assert time.monotonic() - began < pause_s / 2
    result = check_sorted(feed.read_sorted())
    assert result.txns == [(change_ts, "t-quiet", [b"v"])]
    assert result.resolved[-1] == change_ts
    assert feed.sorter.terminate(60) == 0  # a stop ends a pause too


def test_missing_jars_is_a_clear_error(
    clusters: Clusters, factory: ServiceFactory, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    (home / "lib").mkdir(parents=True)
    (home / "lib" / "spark.missing").write_text(
        "spark-sql-kafka-0-10_2.13:4.2.0 could not be resolved from Maven Central"
    )
    feed_file = tmp_path / "feed.yaml"
    feed_file.write_text(
        "name: nojars\nsource: dc-a\nsink-uri: kafka://dc-b/out\ntopics: [x]\nmode: ordered\n"
    )
    config = factory.write_config(clusters, tmp_path / "c.yaml", control_cluster="dc-b")
    proc = ServiceProcess(
        "sorter",
        feed="nojars",
        feed_file=feed_file,
        config_file=config,
        workdir=tmp_path,
        env={"CROSSFEED_HOME": str(home)},
    )
    proc.start()
    assert proc.wait_exit(60) == 1
    assert "could not be resolved from Maven Central" in proc.log_text()
    assert "Traceback" not in proc.log_text()


def test_the_release_producer_reports_every_refused_record_and_no_delivered_one(
    clusters: Clusters, topic_factory: Any
) -> None:
    """The driver path's producer asks for delivery reports on failures only (a Python
    call per delivered record was half of a big release's flush): a record the broker
    refuses must still reach the callback, so the batch fails and Spark runs it again."""
    from crossfeed.services.sorter.driver_release import RELEASE_PRODUCER

    topic = topic_factory(clusters.b, config={"max.message.bytes": "2000"})
    producer = clients.producer(clusters.b.config, **RELEASE_PRODUCER)
    reports: list[tuple[Any, bytes | None]] = []

    def delivered(err: Any, msg: Any) -> None:
        reports.append((err, msg.value()))

    too_big = os.urandom(8000)  # random: compression must not shrink it below the limit
    for value in (b"a" * 100, b"b" * 100, too_big, b"c" * 100):
        clients.produce_copy(producer, topic, value, None, 0, delivered, 0, None)
    assert producer.flush(30) == 0
    assert reports, "a refused record was not reported"
    assert all(err is not None for err, _ in reports), reports
    assert too_big in [value for _, value in reports]
