"""Consumer failover: from losing dc-a to a consumer group reading on dc-b.

An application produces ``rate`` records/s (value ``<partition>:<seq>``) to a topic on
dc-a that the replicator copies to dc-b. Its consumer group starts ``HEAD_START_S``
later and reads at the same rate, so it stays that far behind the head (a consumer
exactly at the head would have nothing to read on dc-b), committing after every batch.
Once dc-b holds a translated offset for every partition and ``SETTLE_S`` more have
passed, dc-a is killed (kill -9) and the clock starts once its process is gone
(``timeline_s.kill_took_s``: how long that took). The replicator's failover step
runs (:mod:`failover_sides`), then the same group starts on dc-b (auto.offset.reset
earliest: a partition with no translated offset is read from the start, as it would be).

With ``side.opt_in`` the application's consumer is the client library's
``TimestampedConsumer`` recording every commit on dc-b too (the opt-in); otherwise a
plain confluent-kafka consumer.

* ``ready_s``: kill → every partition has delivered a record on dc-b;
* ``re_read``: records at or before the group's last committed position on dc-a that it
  reads again on dc-b; ``skipped``: records after it, present on dc-b, never read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions

from crossfeed.bench.cleanup import Janitor, delete_groups
from crossfeed.bench.failover_sides import FailoverSide
from crossfeed.bench.measure import create_topics
from crossfeed.client import TimestampedConsumer
from crossfeed.kafka import clients

HEAD_START_S = 3.0
SETTLE_S = 3.0
TRANSLATED_TIMEOUT_S = 120.0
READ_TIMEOUT_S = 60.0


def parse_value(value: bytes | None) -> tuple[int, int] | None:
    """``b"3:1207"`` -> (partition 3, seq 1207); None for anything else."""
    try:
        p, s = (value or b"").split(b":", 1)
        return int(p), int(s)
    except ValueError:
        return None


def reread_skipped(committed: dict[int, int], first_read: dict[int, int]) -> tuple[int, int]:
    """Per partition: last seq committed on dc-a (-1: none) vs first seq read on dc-b."""
    re_read = skipped = 0
    for p, first in first_read.items():
        last = committed.get(p, -1)
        re_read += max(0, last - first + 1)
        skipped += max(0, first - last - 1)
    return re_read, skipped


class _Loop:
    """A daemon thread running ``step`` until stopped (never joined on a dead cluster)."""

    def __init__(self, step: Callable[[], None]) -> None:
        self.stop = threading.Event()
        self.error: str | None = None
        self._step = step
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self._step()
        except Exception as err:
            if not self.stop.is_set():
                self.error = f"{type(err).__name__}: {err}"


class App:
    """The application on dc-a: a producer and a consumer group that trails it."""

    def __init__(
        self,
        conf: dict[str, Any],
        topic: str,
        group: str,
        partitions: int,
        rate: float,
        destination: dict[str, Any] | None = None,
    ):
        """``destination``: the client config of dc-b for the client library's opt-in
        (None: a plain consumer)."""
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.producer = clients.producer(conf, **{"linger.ms": 5})
        settings = {"group.id": group, "fetch.wait.max.ms": 50, "max.poll.interval.ms": 60000}
        self.consumer: Any = clients.consumer(conf, **settings)
        if destination is not None:
            self.consumer.close()  # the same settings, through the client library
            self.consumer = TimestampedConsumer(opted_in(conf, settings, destination))
        self.sent = 0
        self.read = 0
        self.committed: dict[int, int] = {}
        self._t0 = time.monotonic()
        self._prod = _Loop(self._produce)
        self._cons: _Loop | None = None
        self._dropper: threading.Thread | None = None

    def _produce(self) -> None:
        due = int((time.monotonic() - self._t0) * self.rate)
        while self.sent < due:
            p = self.sent % self.partitions
            value = f"{p}:{self.sent // self.partitions}".encode()
            self.producer.produce(self.topic, value=value, partition=p)
            self.sent += 1
        self.producer.poll(0)
        time.sleep(0.005)

    def start_consuming(self) -> None:
        self.consumer.subscribe([self.topic])
        self._c0 = time.monotonic()
        self._cons = _Loop(self._consume)

    def _consume(self) -> None:
        if self.read >= (time.monotonic() - self._c0) * self.rate:
            time.sleep(0.01)
            return
        batch = [m for m in self.consumer.consume(200, timeout=0.2) if not m.error()]
        if not batch:
            return
        last: dict[int, int] = {}
        for msg in batch:
            parsed = parse_value(msg.value())
            if parsed:
                last[parsed[0]] = parsed[1]
        self.consumer.commit(asynchronous=False)
        self.committed.update(last)
        self.read += len(batch)

    def halt(self) -> str | None:
        """Stop both loops (dc-a is gone; nothing is closed cleanly). Returns a loop error."""
        for loop in (self._prod, self._cons):
            if loop is not None:
                loop.stop.set()
        errors = [loop.error for loop in (self._prod, self._cons) if loop and loop.error]
        if self._dropper is None:
            # Closing talks to dc-a, which is gone: let a daemon thread wait for it.
            self._dropper = threading.Thread(target=self._drop, daemon=True)
            self._dropper.start()
        return errors[0] if errors else None

    def closed(self, timeout_s: float) -> None:
        """Wait (dc-a is back) until the consumer has left, so its group can be deleted."""
        if self._dropper is not None:
            self._dropper.join(timeout=timeout_s)

    def _drop(self) -> None:
        for loop in (self._prod, self._cons):
            if loop is not None:
                loop.thread.join(timeout=300)
        self.producer.purge()
        self.consumer.close()


def opted_in(
    conf: dict[str, Any], settings: dict[str, Any], destination: dict[str, Any]
) -> dict[str, Any]:
    """A TimestampedConsumer's config: what ``clients.consumer`` sets, and the opt-in."""
    base = {
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    }
    recorded = {f"timestamps.destination.{k}": v for k, v in destination.items()}
    return {**conf, **base, **settings, **recorded}


def translated(conf: dict[str, Any], group: str, partitions: int) -> bool:
    """True once dc-b holds a committed offset of ``group`` for every partition."""
    admin = clients.admin(conf)
    try:
        future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        result = future[group].result(timeout=10)
    except Exception:
        return False
    return sum(1 for tp in result.topic_partitions if tp.offset >= 0) >= partitions


def read_on_target(
    conf: dict[str, Any], topic: str, group: str, partitions: int, t0: float
) -> dict[str, Any]:
    consumer = clients.consumer(conf, **{"group.id": group, "fetch.wait.max.ms": 50})
    consumer.subscribe([topic])
    first: dict[int, int] = {}
    first_at: float | None = None
    deadline = time.monotonic() + READ_TIMEOUT_S
    try:
        while len(first) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.1):
                if msg.error():
                    continue
                parsed = parse_value(msg.value())
                if parsed and parsed[0] not in first:
                    first[parsed[0]] = parsed[1]
                    first_at = first_at or time.monotonic()
        ready_at = time.monotonic() if len(first) == partitions else None
    finally:
        consumer.close()
    return {
        "first": first,
        "first_s": None if first_at is None else first_at - t0,
        "ready_s": None if ready_at is None else ready_at - t0,
    }


def run(
    side: FailoverSide,
    source: dict[str, Any],
    target: dict[str, Any],
    janitor: Janitor,
    *,
    run_id: str,
    kill_source: Callable[[], object],
    restart_source: Callable[[], object],
    partitions: int = 8,
    rate: float = 1000.0,
) -> dict[str, Any]:
    topic, group = f"bench-{run_id}-fo-{side.name}", f"bench-{run_id}-fo-{side.name}-app"
    create_topics(source, [topic], partitions)
    janitor.topics(source, [topic])
    janitor.topics(target, [topic])
    app: App | None = None
    began = time.monotonic()
    timeline: dict[str, float] = {}
    try:
        side.start(topic, group)
        app = App(source, topic, group, partitions, rate, target if side.opt_in else None)
        time.sleep(HEAD_START_S)
        app.start_consuming()
        deadline = time.monotonic() + TRANSLATED_TIMEOUT_S
        while not translated(target, group, partitions):
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{side.name}: no translated offset of {group} on dc-b for all "
                    f"{partitions} partitions within {TRANSLATED_TIMEOUT_S:.0f}s\n"
                    + side.log_tail()
                )
            time.sleep(0.5)
        timeline["translated_s"] = time.monotonic() - began
        time.sleep(SETTLE_S)
        janitor.restart_later("dc-a", restart_source)
        killing = time.monotonic()
        timeline["killed_s"] = killing - began
        kill_source()
        # The clock starts once dc-a is gone: the kernel takes up to 2 s to tear down a
        # broker JVM after kill -9 (seen on the first kill of a run), time no replicator
        # can use and the same for both sides — it is kept apart as kill_took_s.
        t0 = time.monotonic()
        timeline["kill_took_s"] = t0 - killing
        app_error = app.halt()
        step = side.fail_over(group)
        step_s = time.monotonic() - t0
        read = read_on_target(target, topic, group, partitions, t0)
        re_read, skipped = reread_skipped(app.committed, read["first"])
        return {
            "system": side.name,
            "consumer": "TimestampedConsumer, commits recorded on dc-b"
            if side.opt_in
            else "confluent-kafka Consumer",
            "rate_per_s": rate,
            "consumed_on_source": app.read,
            "produced_on_source": app.sent,
            "failover_step": step,
            "failover_step_s": step_s,
            "first_record_s": read["first_s"],
            "ready_s": read["ready_s"],
            "partitions_read": len(read["first"]),
            "re_read": re_read,
            "skipped": skipped,
            "timeline_s": timeline,
            **({"app_error": app_error} if app_error else {}),
        }
    finally:
        if app is not None:
            app.halt()
        # dc-a first: stopping a replicator, deleting topics there, all wait on it.
        restart_source()
        janitor.restarted("dc-a")
        timeline["restarted_s"] = time.monotonic() - began
        if app is not None:
            app.closed(30)
        side.stop()
        timeline["stopped_s"] = time.monotonic() - began
        janitor.drop_topics(source, [topic])
        janitor.drop_topics(target, [topic])
        for conf in (source, target):
            delete_groups(conf, [group])
