"""Failover of a consumer people really run: a plain confluent-kafka consumer group.

No crossfeed client library: the group subscribes, polls batches and commits after every
batch, the way application code does. It consumes on dc-a while records keep arriving
(1,000 a second over 8 partitions); dc-a is killed (kill -9) mid-stream; after the
failover the same code, with nothing changed but ``bootstrap.servers``, resumes on dc-b.

What is measured, per partition, by the record ids (each copy keeps its value):

* skipped: records dc-b holds that the group read neither on dc-a nor on dc-b — must be 0;
* re-read: records read on dc-a and again on dc-b — at most the failover report's
  ``reread_max`` for that group partition, which is what the report promises.

The translator's rounds are 60 s apart: the group on dc-b follows its commits on dc-a
through the commit stream alone.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError

from crossfeed.feeds import load_feed_file
from tests.integration.test_failover import (
    failover_cli,
    failover_routes,
    reread_bounds,
    wait_for,
)
from tests.support.apps import Produce
from tests.support.verify import read_many

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PARTITIONS = 8
RATE = 1000  # records per second, over all partitions
RUN_S = 6.0
SLOW_ROUNDS = {"coordinator": {"translate_interval_s": 60.0}}


def application_consumer(bootstrap: str, group: str) -> Consumer:
    """What an application configures; only ``bootstrap.servers`` differs between DCs."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


class ConsumeAndCommit(threading.Thread):
    """Polls batches and commits synchronously after each, until stopped or failing."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = application_consumer(bootstrap, group)
        self.consumer.subscribe([topic])
        self.stop = threading.Event()
        self.seen: dict[int, list[str]] = defaultdict(list)
        self.commits = 0

    def run(self) -> None:
        while not self.stop.is_set():
            batch = self.consumer.consume(100, timeout=0.1)
            got = False
            for msg in batch:
                if msg.error() is None:
                    self.seen[msg.partition()].append(msg.value().decode())
                    got = True
            if got:
                try:
                    self.consumer.commit(asynchronous=False)
                    self.commits += 1
                except Exception:  # dc-a died mid-commit: the application would crash here
                    return


def read_to_end(bootstrap: str, group: str, topic: str, timeout_s: float = 60) -> dict[int, list]:
    """The same application code on dc-b: everything it reads until every partition is at
    its end and nothing more arrives."""
    consumer = application_consumer(bootstrap, group)
    consumer.subscribe([topic])
    seen: dict[int, list[str]] = defaultdict(list)
    at_end: set[int] = set()
    quiet_since = time.monotonic()
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if len(at_end) == PARTITIONS and time.monotonic() - quiet_since > 2:
                    return seen
                continue
            quiet_since = time.monotonic()
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                continue
            at_end.discard(msg.partition())
            seen[msg.partition()].append(msg.value().decode())
        raise AssertionError(f"not at the end of every partition after {timeout_s}s: {at_end}")
    finally:
        consumer.close()


def test_a_plain_consumer_group_fails_over_mid_stream_with_nothing_skipped(
    clusters, services, topic_factory, unique
):
    topic = topic_factory(clusters.a, partitions=PARTITIONS)
    group = unique("app")
    feed = services.start_feed("plain", clusters, [topic], settings=SLOW_ROUNDS)
    spec = load_feed_file(feed.feed_file)
    producer = Produce(clusters.a.bootstrap, topic, PARTITIONS, RATE)
    app: ConsumeAndCommit | None = None
    with failover_routes(clusters, [spec]) as (url, loop):
        translator = loop.translator(spec.name)
        assert translator is not None
        wait_for("the commit stream", lambda: translator.commit_mode == "stream", timeout_s=60)
        producer.start()
        app = ConsumeAndCommit(clusters.a.bootstrap, group, topic)
        app.start()
        time.sleep(RUN_S)
        assert app.commits > 10 and app.is_alive(), "the application is not committing"

        clusters.stop("dc-a", hard=True)  # kill -9, while producing and committing
        try:
            app.stop.set()
            producer.stop.set()
            app.join(15)  # a commit in flight when dc-a died may hang: the thread is a daemon
            producer.join(15)
            # close() may wait for the lost group coordinator: not on the test's time.
            threading.Thread(target=app.consumer.close, daemon=True).start()
            feed.stop_all(hard=True)
            report = failover_cli(feed, url)
            bound = reread_bounds(report, group)

            on_b = read_to_end(clusters.b.bootstrap, group, topic)
            copies = read_many(clusters.b.config, [topic])[topic]
        finally:
            clusters.start("dc-a")

    replicated = {p: {(r.value or b"").decode() for r in records} for p, records in copies.items()}
    read_a = {p: set(values) for p, values in app.seen.items()}
    read_b = {p: set(values) for p, values in on_b.items()}
    for p in range(PARTITIONS):
        assert len(on_b.get(p, [])) == len(read_b.get(p, set())), "read twice on dc-b"
    skipped = {
        p: sorted(replicated.get(p, set()) - read_a.get(p, set()) - read_b.get(p, set()))
        for p in range(PARTITIONS)
    }
    reread = {p: len(read_a.get(p, set()) & read_b.get(p, set())) for p in range(PARTITIONS)}
    print(
        f"produced {producer.sent}, replicated {sum(len(v) for v in replicated.values())}, "
        f"read on dc-a {sum(len(v) for v in read_a.values())} in {app.commits} commits, "
        f"on dc-b {sum(len(v) for v in read_b.values())}; re-read {reread} "
        f"(total {sum(reread.values())}), bound {bound}; positions: "
        f"{report['positions_at_last_commit']} at last commit, {report['positions_stale']} "
        f"stale, <= {report['reread_max_records']} re-read"
    )
    assert all(not s for s in skipped.values()), {p: s[:5] for p, s in skipped.items() if s}
    assert set(bound) == set(range(PARTITIONS)) and all(b >= 0 for b in bound.values()), bound
    assert all(reread[p] <= bound[p] for p in range(PARTITIONS)), (reread, bound)
