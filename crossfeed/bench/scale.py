"""How each replicator's cost grows with the work, in ``make bench`` (section ``scale``).

* **Partitions.** One topic with 8, 128 and 1,024 partitions (the same number of records
  each time): start-up (launch to a probe record visible on dc-b), then throughput of a
  backlog written while the replicator runs (first to last record visible on dc-b), and
  peak RSS of the replicator's processes; crossfeed with one puller and with two.
* **Discovery.** 1,000 topics selected by one regex are mirrored; then a new topic that
  matches is created and one record written to it: the time until that record is visible
  on dc-b. Each replicator runs with its defaults here — crossfeed looks for new topics
  every ``puller.topic_refresh_s`` (5 s), MirrorMaker 2 every
  ``refresh.topics.interval.seconds`` (600 s): that default is what its users meet, so the
  wait is bounded and reported as not reached.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from crossfeed.bench import load
from crossfeed.bench.cleanup import Janitor
from crossfeed.bench.measure import PeakRss, TargetWatch, create_topics
from crossfeed.bench.systems import Replicator
from crossfeed.kafka import clients

PARTITION_COUNTS = (8, 128, 1024)
DISCOVERY_TOPICS = 1000
DISCOVERY_WAIT_S = 120.0  # longest wait for the new topic's record (MM2's default: 600 s)
MIRRORED_WAIT_S = 600.0  # longest wait for the 1,000 topics' records before the new one
SETTLE_S = 10.0  # after the probe: several pullers have shared out their tasks


def partitions_run(
    system: Replicator,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    *,
    partitions: int,
    records: int,
    payloads: Path,
    workdir: Path,
    settle_s: float = SETTLE_S,
) -> dict[str, Any]:
    """``records`` over ``partitions`` partitions through ``system``. The replicator starts
    on the empty topic and copies a probe record first (start-up: launch to the probe on
    dc-b); after ``settle_s`` (several pullers share out their tasks) the backlog is
    written while it runs, so the figure is the steady copy rate, not a task handoff."""
    topic = f"bench-scale-{uuid.uuid4().hex[:6]}-p{partitions}"
    create_topics(a, [topic], partitions)
    janitor.topics(a, [topic])
    janitor.topics(b, [topic])
    watch = TargetWatch(b, topic, partitions).start()
    began = time.monotonic()
    rss: PeakRss | None = None
    try:
        rss = PeakRss(system.start([topic]))
        rss.start()
        producer = clients.producer(a)
        producer.produce(topic, value=b"probe", partition=0)
        producer.flush(30)
        if not watch.wait_for(1, timeout_s=300):
            raise RuntimeError(f"the probe record did not arrive in 300 s\n{system.log_tail()}")
        startup = time.monotonic() - began
        time.sleep(settle_s)
        watch.first_at = None  # the rate counts the backlog only
        load.backlog(a, topic, records, payloads, workdir, janitor, even=False)
        if not watch.wait_for(records + 1, timeout_s=900, idle_s=180):
            raise RuntimeError(
                f"{watch.count - 1:,} of {records:,} records arrived\n{system.log_tail()}"
            )
        assert watch.first_at is not None and watch.last_at is not None
        return {
            "partitions": partitions,
            "records": records,
            "records_per_s": round(records / max(watch.last_at - watch.first_at, 1e-3), 1),
            "startup_s": round(startup, 1),
            "peak_rss_mb": sum(rss.finish().values()),
        }
    finally:
        if rss is not None:
            rss.stopping.set()
        watch.stop()
        system.stop()
        janitor.drop_topics(a, [topic])
        janitor.drop_topics(b, [topic])


def discovery_run(
    system: Replicator,
    a: dict[str, Any],
    b: dict[str, Any],
    janitor: Janitor,
    *,
    topics: int = DISCOVERY_TOPICS,
) -> dict[str, Any]:
    """``topics`` one-partition topics selected by a regex, then a new matching one: the
    seconds from its first record's write to that record visible on dc-b."""
    prefix = f"bench-disc-{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{i:04d}" for i in range(topics)]
    fresh = f"{prefix}-new"
    admin = clients.admin(a)
    for start in range(0, len(names), 200):  # the controller takes big requests slowly
        futures = admin.create_topics([NewTopic(n, 1, 1) for n in names[start : start + 200]])
        for future in futures.values():
            future.result(timeout=120)
    janitor.topics(a, [*names, fresh])
    janitor.topics(b, [*names, fresh])
    producer = clients.producer(a, **{"linger.ms": 5})
    for name in names:  # one record each: "mirrored" means that record is on dc-b
        producer.produce(name, value=b"x")
    producer.flush(60)
    try:
        began = time.monotonic()
        system.start([f"{prefix}-.*"])
        mirrored = _wait_mirrored(b, names, MIRRORED_WAIT_S)
        result: dict[str, Any] = {
            "topics": topics,
            "all_mirrored_s": round(time.monotonic() - began, 1) if mirrored else None,
        }
        if not mirrored:
            result["error"] = (
                f"the {topics:,} topics were not all on dc-b after {MIRRORED_WAIT_S:.0f} s"
            )
            return result
        create_topics(a, [fresh], 1)
        watch = TargetWatch(b, fresh, 1).start()
        try:
            written = time.monotonic()
            producer.produce(fresh, value=b"new")
            producer.flush(30)
            arrived = watch.wait_for(1, timeout_s=DISCOVERY_WAIT_S)
            result["new_topic_s"] = round(time.monotonic() - written, 1) if arrived else None
            result["waited_s"] = DISCOVERY_WAIT_S
        finally:
            watch.stop()
        return result
    finally:
        system.stop()
        janitor.drop_topics(a, [*names, fresh])
        janitor.drop_topics(b, [*names, fresh])


def _wait_mirrored(b: dict[str, Any], names: list[str], timeout_s: float) -> bool:
    """True once every topic in ``names`` holds a record on dc-b (end offset > 0)."""
    consumer = clients.consumer(b, **{"group.id": f"bench-disc-{uuid.uuid4().hex[:6]}"})
    try:
        left = set(names)
        deadline = time.monotonic() + timeout_s
        while left and time.monotonic() < deadline:
            existing = set(consumer.list_topics(timeout=10).topics)
            for name in [n for n in left if n in existing][:200]:
                with contextlib.suppress(Exception):
                    _low, high = consumer.get_watermark_offsets(
                        TopicPartition(name, 0), timeout=5, cached=False
                    )
                    if high > 0:
                        left.discard(name)
            if left:
                time.sleep(1.0)
        return not left
    finally:
        consumer.close()
