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

import json
import threading
import time
from collections import defaultdict
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

from crossfeed.client import TimestampedConsumer
from crossfeed.feeds import load_feed_file
from tests.integration.test_failover import (
    committed,
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


def application_consumer(bootstrap: str, group: str, reset: str = "earliest") -> Consumer:
    """What an application configures; only ``bootstrap.servers`` differs between DCs."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": reset,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


def opted_in_consumer(bootstrap: str, group: str, destination: str) -> TimestampedConsumer:
    """The same application settings through the client library, with the opt-in: each
    commit also recorded on ``destination`` (dc-b) before commit() returns."""
    return TimestampedConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "timestamps.destination.bootstrap.servers": destination,
            "timestamps.destination.wait.ms": 1000,
        }
    )


class ConsumeAndCommit(threading.Thread):
    """Polls batches and commits synchronously after each, until stopped or failing."""

    def __init__(
        self,
        bootstrap: str,
        group: str,
        topic: str,
        consumer: Consumer | TimestampedConsumer | None = None,
    ) -> None:
        super().__init__(daemon=True)
        self.consumer = consumer or application_consumer(bootstrap, group)
        self.consumer.subscribe([topic])
        self.stop = threading.Event()
        self.seen: dict[int, list[str]] = defaultdict(list)
        self.commits = 0
        self.committed: dict[int, int] = {}  # partition -> last offset committed (next to read)
        self.commit_ms: list[float] = []  # how long each synchronous commit took

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
                    began = time.perf_counter()
                    done = self.consumer.commit(asynchronous=False) or []
                    self.commit_ms.append((time.perf_counter() - began) * 1000)
                    self.commits += 1
                except Exception:  # dc-a died mid-commit: the application would crash here
                    return
                self.committed.update({tp.partition: tp.offset for tp in done if tp.offset >= 0})


def reread_committed(app: ConsumeAndCommit, on_b: dict[int, list[str]]) -> dict[int, int]:
    """Per partition, records the group had committed on dc-a (values ``<p>:<n>`` sit at
    offset n of a fresh topic) that it read again on dc-b. Records read but not yet
    committed when dc-a died are read again by any consumer and are not counted."""
    return {
        p: sum(1 for v in on_b.get(p, []) if int(v.split(":")[1]) < app.committed.get(p, 0))
        for p in range(PARTITIONS)
    }


def read_to_end(
    bootstrap: str, group: str, topic: str, timeout_s: float = 60, parts: int = PARTITIONS
) -> dict[int, list]:
    """The same application code on dc-b: everything it reads until every partition is at
    its end and nothing more arrives."""
    consumer = application_consumer(bootstrap, group)
    consumer.subscribe([topic])
    try:
        return read_until_eof(consumer, parts, timeout_s)
    finally:
        consumer.close()


def read_until_eof(consumer: Consumer, parts: int, timeout_s: float = 60) -> dict[int, list]:
    """What a subscribed consumer reads until all ``parts`` partitions are at their end
    and nothing more arrives for 2 s."""
    seen: dict[int, list[str]] = defaultdict(list)
    at_end: set[int] = set()
    quiet_since = time.monotonic()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            if len(at_end) == parts and time.monotonic() - quiet_since > 2:
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


def skipped_and_reread(
    copies: dict[int, list[Any]], seen_a: dict[int, list[str]], seen_b: dict[int, list[str]]
) -> tuple[dict[int, list[str]], dict[int, int]]:
    """Per partition, by record value: the copies read neither on dc-a nor on dc-b, and how
    many records were read on both."""
    skipped, reread = {}, {}
    for p, records in copies.items():
        read_a, read_b = set(seen_a.get(p, [])), set(seen_b.get(p, []))
        skipped[p] = sorted({(r.value or b"").decode() for r in records} - read_a - read_b)
        reread[p] = len(read_a & read_b)
    return skipped, reread


@pytest.mark.parametrize("client", ["plain", "opted-in"])
def test_a_consumer_group_fails_over_mid_stream_with_nothing_skipped(
    client, clusters, services, topic_factory, unique
):
    """``plain``: confluent-kafka's Consumer, re-reads within the report's bound;
    ``opted-in``: the client library recording each commit on dc-b too, nothing re-read
    even though dc-a dies with its last commits (kill -9)."""
    topic = topic_factory(clusters.a, partitions=PARTITIONS)
    group = unique("app")
    opted_in = client == "opted-in"
    feed = services.start_feed("plain", clusters, [topic], settings=SLOW_ROUNDS)
    spec = load_feed_file(feed.feed_file)
    producer = Produce(clusters.a.bootstrap, topic, PARTITIONS, RATE)
    app: ConsumeAndCommit | None = None
    with failover_routes(clusters, [spec]) as (url, loop):
        translator = loop.translator(spec.name)
        assert translator is not None
        wait_for("the commit stream", lambda: translator.commit_mode == "stream", timeout_s=60)
        producer.start()
        consumer = (
            opted_in_consumer(clusters.a.bootstrap, group, clusters.b.bootstrap)
            if opted_in
            else None
        )
        app = ConsumeAndCommit(clusters.a.bootstrap, group, topic, consumer)
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

    for p in range(PARTITIONS):
        assert len(on_b.get(p, [])) == len(set(on_b.get(p, []))), "read twice on dc-b"
    skipped, reread = skipped_and_reread(copies, app.seen, on_b)
    print(
        f"produced {producer.sent}, replicated {sum(len(v) for v in copies.values())}, "
        f"read on dc-a {sum(len(v) for v in app.seen.values())} in {app.commits} commits, "
        f"on dc-b {sum(len(v) for v in on_b.values())}; re-read {reread} "
        f"(total {sum(reread.values())}), bound {bound}; positions: "
        f"{report['positions_at_last_commit']} at last commit, {report['positions_stale']} "
        f"stale, <= {report['reread_max_records']} re-read"
    )
    assert all(not s for s in skipped.values()), {p: s[:5] for p, s in skipped.items() if s}
    assert set(bound) == set(range(PARTITIONS)) and all(b >= 0 for b in bound.values()), bound
    committed_again = reread_committed(app, on_b)
    # Re-reads within the report's bound: all of them for a plain consumer (its in-flight
    # batch failed to commit), the committed ones with the opt-in (its last batch may have
    # been read, then lost with dc-a before its commit: read again by any consumer).
    counted = committed_again if opted_in else reread
    assert all(counted[p] <= bound[p] for p in range(PARTITIONS)), (counted, bound)
    took = sorted(app.commit_ms)
    print(
        f"committed on dc-a and read again on dc-b: {committed_again}; commit() took "
        f"p50 {took[len(took) // 2]:.1f} ms, p99 {took[int(len(took) * 0.99)]:.1f} ms"
    )
    if opted_in:  # the last commit of every partition was on dc-b before commit() returned
        stats = app.consumer.destination_stats()
        print(f"opt-in: {stats}")
        assert sum(committed_again.values()) == 0, committed_again
        # In full (pytest cuts a long repr): where each partition's position was learnt.
        assert report["positions_stale"] == 0, json.dumps(report["groups"], indent=1)


# -- groups of every kind at the moment dc-a is lost ----------------------------------------

BACKLOG = 100_000
SMALL = 100  # records per partition of the small topic


def produce_values(
    bootstrap: str, topic: str, partitions: int, count: int, prefix: str = ""
) -> None:
    """``count`` records, value ``<prefix><partition>:<n>``, as fast as the producer goes."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for n in range(count):
        while True:
            try:
                value = f"{prefix}{n % partitions}:{n // partitions}".encode()
                producer.produce(topic, value=value, partition=n % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def commit_some(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    """What a consumer of some partitions only commits: ``offsets`` and nothing else."""
    consumer = application_consumer(bootstrap, group)
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in offsets])
    seen: dict[int, int] = {}
    deadline = time.monotonic() + 30
    while any(seen.get(p, 0) < n for p, n in offsets.items()):
        assert time.monotonic() < deadline, seen
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen[msg.partition()] = msg.offset() + 1
    consumer.commit(
        offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False
    )
    consumer.close()


class ActiveMember(threading.Thread):
    """A member of ``group`` on dc-b that polls and never commits: the group is live there."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = application_consumer(bootstrap, group)
        self.consumer.subscribe([topic], on_assign=lambda _c, tps: self.assigned.set())
        self.assigned = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.consumer.poll(0.1)
        self.consumer.close()


def values_by_partition(messages: dict[int, list[str]]) -> dict[int, list[str]]:
    return {p: list(v) for p, v in messages.items() if v}


def test_groups_of_every_kind_when_dc_a_is_lost(clusters, services, topic_factory, unique):
    """Three kinds of group at once, plain confluent-kafka consumers:

    * ``fast`` reads a backlog at full speed (no pause between polls, a commit after every
      batch) when dc-a is killed: none skipped, re-reads within the report's bound;
    * ``early``/``late`` committed on partitions 0 and 1 only (auto.offset.reset earliest
      and latest): on dc-b they have offsets on 0 and 1 only — never a translated zero —
      so partitions 2 and 3 start as their auto.offset.reset says;
    * ``active`` committed on dc-a while a member of it runs on dc-b: never moved, and
      the failover report lists it as active.
    """
    a, b = clusters.a.bootstrap, clusters.b.bootstrap
    big = topic_factory(clusters.a, partitions=PARTITIONS)
    small = topic_factory(clusters.a, partitions=4)
    groups = {name: unique(name) for name in ("fast", "early", "late", "active")}
    produce_values(a, big, PARTITIONS, BACKLOG)
    produce_values(a, small, 4, 4 * SMALL)
    feed = services.start_feed("kinds", clusters, [big, small], settings=SLOW_ROUNDS)
    spec = load_feed_file(feed.feed_file)
    read_many(clusters.b.config, [big, small], expect=BACKLOG + 4 * SMALL, timeout_s=120)
    member = ActiveMember(b, groups["active"], small)
    member.start()
    assert member.assigned.wait(30), "the dc-b member of 'active' got no partitions"
    fast: ConsumeAndCommit | None = None
    with failover_routes(clusters, [spec]) as (url, loop):
        translator = loop.translator(spec.name)
        assert translator is not None
        wait_for("the commit stream", lambda: translator.commit_mode == "stream", timeout_s=60)
        commit_some(a, groups["early"], small, {0: 50, 1: 50})
        commit_some(a, groups["late"], small, {0: 50, 1: 50})
        commit_some(a, groups["active"], small, {0: 60, 1: 60, 2: 60, 3: 60})
        fast = ConsumeAndCommit(a, groups["fast"], big)
        fast.start()
        # A consumer drains one partition's fetch after another: wait until it has read
        # (and committed) on three, so dc-a dies while it is deep in several.
        wait_for(
            "the fast group reading three partitions",
            lambda: sum(1 for v in fast.seen.values() if v) >= 3,
            timeout_s=60,
        )
        clusters.stop("dc-a", hard=True)  # kill -9 while it reads and commits
        try:
            fast.stop.set()
            fast.join(15)
            threading.Thread(target=fast.consumer.close, daemon=True).start()
            feed.stop_all(hard=True)
            report = failover_cli(feed, url)
            bound = reread_bounds(report, groups["fast"])
            assert groups["active"] in report["active"], report["active"]
            assert groups["active"] not in report["moved"], report["moved"]
            assert committed(clusters.b.config, groups["active"]) == {}
            member.stop.set()
            member.join(15)

            on_b = read_to_end(b, groups["fast"], big)
            offsets = {n: committed(clusters.b.config, groups[n]) for n in ("early", "late")}
            early = read_to_end(b, groups["early"], small, parts=4)
            late = application_consumer(b, groups["late"], reset="latest")
            late.subscribe([small])
            copies_of_late = read_until_eof(late, 4)
            produce_values(b, small, 4, 4 * 5, prefix="b-")
            new_of_late = read_until_eof(late, 4)
            late.close()
            copies = read_many(clusters.b.config, [big])[big]
        finally:
            clusters.start("dc-a")

    # fast: none skipped, re-reads within the bound
    skipped, reread = skipped_and_reread(copies, fast.seen, on_b)
    read_a = sum(len(set(v)) for v in fast.seen.values())
    print(
        f"fast: read on dc-a {read_a} of {BACKLOG} in {fast.commits} commits, on dc-b "
        f"{sum(len(v) for v in on_b.values())}; re-read {reread} (total "
        f"{sum(reread.values())}), bound {bound} (partitions without one: never committed)"
    )
    assert read_a < BACKLOG, "dc-a was lost after the group had read the whole backlog"
    assert all(not s for s in skipped.values()), {p: s[:5] for p, s in skipped.items() if s}
    assert len(bound) >= 3 and all(reread[p] <= bound[p] for p in bound), (reread, bound)
    # A partition it had never committed on when dc-a died has no offset on dc-b: it is
    # read from the start there (auto.offset.reset earliest), every copy.
    for p in set(range(PARTITIONS)) - set(bound):
        assert len(set(on_b[p])) == len(copies[p]), (p, len(on_b[p]), len(copies[p]))

    # early/late: offsets where they committed, nowhere else
    for name in ("early", "late"):
        assert {p for _t, p in offsets[name]} == {0, 1}, (name, offsets[name])
    expect_copies = {p: [f"{p}:{n}" for n in range(50, SMALL)] for p in (0, 1)}
    assert values_by_partition(early) == {
        **expect_copies,
        **{p: [f"{p}:{n}" for n in range(SMALL)] for p in (2, 3)},
    }
    assert values_by_partition(copies_of_late) == expect_copies
    assert values_by_partition(new_of_late) == {
        p: [f"b-{p}:{n}" for n in range(5)] for p in range(4)
    }
