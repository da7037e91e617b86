"""Failover and failback of clients people really run: a plain confluent-kafka consumer,
a faust-streaming application and the Java console consumer, each as its own process
with a consumer group.

Each test: records arrive on dc-a (400 a second over 4 partitions) while the client
consumes and commits the way it does by default; dc-a is killed (kill -9) mid-stream and
the client with it; ``crossfeed failover``; the same program, nothing changed but the
bootstrap servers, reads on dc-b until every copy is read, then dc-b's own new writes,
and is stopped cleanly. Then failback: dc-a returns, a reverse feed copies dc-b's writes
back, ``crossfeed failback`` moves the group, and the program on dc-a reads exactly the
dc-b writes it had not read — nothing it read on dc-b, none of dc-a's old records.

Records are named by their values (``<partition>:<n>``; ``b1-``/``b2-`` for dc-b's
writes), so reads on dc-a and dc-b compare although copies sit at other offsets.
Asserted on failover: nothing replicated is skipped, and per partition no more records
are read again than the failover report's ``reread_max``.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from crossfeed.client.rest import CoordinatorClient
from crossfeed.feeds import load_feed_file
from tests.integration.test_failover import (
    FAST,
    _spec_body,
    committed,
    failover_cli,
    failover_routes,
    reread_bounds,
    wait_for,
)
from tests.support.apps import (
    AppProcess,
    Produce,
    console_consumer,
    faust_app,
    faust_counts,
    plain_app,
    produce_batch,
)
from tests.support.verify import read_many

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

PARTITIONS = 4
RATE = 400
RUN_S = 5.0
DC_B_WRITES = 40


def by_partition(records: list[tuple[int, str]]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = defaultdict(set)
    for partition, value in records:
        out[partition].add(value)
    return out


def fail_over_and_back(
    clusters: Any,
    services: Any,
    app: AppProcess,
    topic: str,
    group: str,
    feed_topics: list[str],
    copying: Callable[[], bool] = lambda: True,
) -> dict[str, Any]:
    """The whole scenario (module docstring); returns what each step saw. ``copying``:
    what must be true on dc-b before dc-a is lost (beyond the topic's copies)."""
    feed = services.start_feed("real", clusters, feed_topics, settings=FAST)
    spec = load_feed_file(feed.feed_file)
    producer = Produce(clusters.a.bootstrap, topic, PARTITIONS, RATE)
    with failover_routes(clusters, [spec]) as (url, loop):
        translator = loop.translator(spec.name)
        assert translator is not None
        wait_for("the commit stream", lambda: translator.commit_mode == "stream", timeout_s=60)
        producer.start()
        app.start(clusters.a.bootstrap)
        app.wait_for("reading on dc-a", lambda r: len(r) > 100, timeout_s=90)

        def topic_copied() -> bool:
            """dc-a is lost mid-copy, not before the feed has started (a new topic's
            first copies may wait for its target topic to answer)."""
            rows = [r for r in translator.rpo() if r.topic == topic]
            return len(rows) == PARTITIONS and all(r.replicated_to for r in rows)

        wait_for("the feed copying every partition", topic_copied, timeout_s=60)
        wait_for("the feed copying what the client needs", copying, timeout_s=60)
        time.sleep(RUN_S)

        clusters.stop("dc-a", hard=True)  # kill -9 while producing and consuming
        try:
            app.kill()  # the client dies with its data center
            producer.stop.set()
            producer.join(15)
            feed.stop_all(hard=True)
            report = failover_cli(feed, url)
            bound = reread_bounds(report, group)
            copies = read_many(clusters.b.config, [topic])[topic]
            replicated = {p: {(r.value or b"").decode() for r in rs} for p, rs in copies.items()}
            read_a = by_partition(app.records(0))

            def all_read(records: list[tuple[int, str]]) -> bool:
                read_b = by_partition(records)
                return all(not (values - read_a[p] - read_b[p]) for p, values in replicated.items())

            # The same program on dc-b: every copy, then dc-b's own writes; a clean stop
            # commits what it read.
            app.start(clusters.b.bootstrap)
            app.wait_for("every copy read on dc-b", all_read, timeout_s=90)
            first_b = produce_batch(clusters.b.bootstrap, topic, PARTITIONS, DC_B_WRITES, "b1-")
            app.wait_for("dc-b's writes", lambda r: first_b <= {v for _, v in r}, timeout_s=60)
            # Stopped once it has committed all it read (faust with exactly_once aborts
            # what its open transaction holds when stopped, the commit included).
            wait_for("the client's commits", lambda: all_committed(clusters.b, group, topic))
            assert app.stop() is not None
            later_b = produce_batch(clusters.b.bootstrap, topic, PARTITIONS, DC_B_WRITES, "b2-")
        finally:
            clusters.start("dc-a")

        reverse = services.start_feed(
            "real-rev",
            clusters,
            feed_topics,
            source="dc-b",
            target="dc-a",
            pullers=0,
            settings=FAST,
        )
        api = CoordinatorClient(url, timeout_s=300)
        body = {"feed": spec.name, "feed_spec": _spec_body(spec), "reverse_feed": reverse.name}
        first = api.request("POST", "/v1/failback", body)
        assert first["reverse"]["action"] == "start-it", first
        reverse.add_puller()
        began = time.monotonic()
        back = api.request("POST", "/v1/failback", {**body, "wait_s": 90})
        waited = time.monotonic() - began
        assert back["reverse"]["caught_up"] and not back["waiting"], back
        # The client killed with dc-a is a member there again until its session times
        # out: failback waits for it to leave, then moves the group.
        assert back["moved"].get(group) == PARTITIONS and not back["active"], back

        # Back on dc-a: exactly what it had not read on dc-b, in order per partition.
        app.start(clusters.a.bootstrap)
        app.wait_for("dc-b's later writes on dc-a", lambda r: later_b <= {v for _, v in r}, 90)
        app.wait_quiet(3.0)
        app.stop()
    return {
        "sent": producer.sent,
        "report": report,
        "bound": bound,
        "replicated": replicated,
        "read_a": read_a,
        "read_b": by_partition(app.records(1)),
        "first_b": first_b,
        "later_b": later_b,
        "after_failback": app.records(2),
        "failback_s": waited,
        "failback": back,
    }


def all_committed(cluster: Any, group: str, topic: str) -> bool:
    """Has ``group`` committed the end of every partition of ``topic`` on ``cluster``?"""
    done = committed(cluster.config, group, stable=True)  # faust commits in transactions
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "crossfeed-probe"})
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()
    return all(done.get((topic, p), -1) >= end for p, end in ends.items())


def check_failover(seen: dict[str, Any]) -> dict[int, int]:
    """Nothing replicated skipped; re-reads within the report's bound. Returns re-reads."""
    replicated, read_a, read_b, bound = (
        seen["replicated"],
        seen["read_a"],
        seen["read_b"],
        seen["bound"],
    )
    skipped = {
        p: sorted(replicated.get(p, set()) - read_a[p] - read_b[p]) for p in range(PARTITIONS)
    }
    reread = {p: len(read_a[p] & read_b[p]) for p in range(PARTITIONS)}
    report = seen["report"]
    print(
        f"produced {seen['sent']}, replicated {sum(len(v) for v in replicated.values())}, "
        f"read on dc-a {sum(len(v) for v in read_a.values())}, on dc-b "
        f"{sum(len(v) for v in read_b.values())}; re-read {reread} (total "
        f"{sum(reread.values())}), bound {bound}, report: <= {report['reread_max_records']}"
    )
    assert all(not s for s in skipped.values()), {p: s[:5] for p, s in skipped.items() if s}
    assert set(bound) == set(range(PARTITIONS)), bound
    assert all(reread[p] <= bound[p] for p in range(PARTITIONS)), (reread, bound)
    assert seen["first_b"] <= set().union(*read_b.values())
    return reread


def check_failback(seen: dict[str, Any]) -> None:
    """After failback the program reads exactly dc-b's writes it had not read there."""
    after = seen["after_failback"]
    print(f"failback moved the group after {seen['failback_s']:.1f}s")
    assert {v for _, v in after} == seen["later_b"], sorted({v for _, v in after})[:10]
    for p in range(PARTITIONS):
        first_seen = list(dict.fromkeys(v for q, v in after if q == p))
        # On failure, the failback report says where each partition was moved.
        expected = [f"b2-{p}:{n}" for n in range(DC_B_WRITES // PARTITIONS)]
        assert first_seen == expected, (first_seen, json.dumps(seen["failback"]["groups"]))


@pytest.mark.parametrize("client", ["plain", "console"])
def test_a_consumer_fails_over_and_back(
    client: str, clusters, services, topic_factory, unique, tmp_path: Path
):
    """``plain``: a confluent-kafka consumer committing after every batch; ``console``:
    ``kafka-console-consumer --group`` (auto-commit every 5 s)."""
    topic = topic_factory(clusters.a, partitions=PARTITIONS)
    group = unique(client)
    app = {"plain": plain_app, "console": console_consumer}[client](tmp_path, group, topic)
    seen = fail_over_and_back(clusters, services, app, topic, group, [topic])
    check_failover(seen)
    check_failback(seen)


# In `make slow`, not `make test`: 3-4 minutes (faust's 60 s session timeout holds the
# failback back: the member that died with dc-a must leave first).
@pytest.mark.slow
def test_a_faust_application_fails_over_and_back_with_its_table(
    clusters, services, topic_factory, unique, tmp_path: Path
):
    topic = topic_factory(clusters.a, partitions=PARTITIONS)
    group = unique("faust")  # a faust app's id is its consumer group
    app = faust_app(tmp_path, group, topic, PARTITIONS)
    # The table's changelog must be copied too: faust rebuilds the table from it.
    changelogs = f"{group}-.*-changelog"

    def changelog_copied() -> bool:
        """faust creates the changelog at its first start: the feed takes it up once it
        sees it (puller.topic_refresh_s), and dc-a must not be lost before."""
        name = f"{group}-seen-changelog"
        try:
            parts = read_many(clusters.b.config, [name], timeout_s=5)[name]
        except (TimeoutError, KafkaException):
            return False
        return len(parts) == PARTITIONS and all(parts.values())

    seen = fail_over_and_back(
        clusters, services, app, topic, group, [topic, changelogs], changelog_copied
    )
    check_failover(seen)
    check_failback(seen)

    # The table came along: on dc-b each key's count goes on from what the mirrored
    # changelog held (never from zero, never past what dc-a had counted) ...
    last_a = dict(faust_counts(app, 0))
    first_b = dict(reversed(faust_counts(app, 1)))
    last_b = dict(faust_counts(app, 1))
    first_back = dict(reversed(faust_counts(app, 2)))
    print(f"counts: last on dc-a {last_a}, first on dc-b {first_b}, last on dc-b {last_b}")
    for key, count in first_b.items():
        assert 1 < count <= last_a[key] + 1, (key, count, last_a)
    # ... and after failback it goes on from dc-b's count, not from dc-a's older one.
    for key, count in first_back.items():
        assert count == last_b[key] + 1, (key, count, last_b)
