"""Consumer failover and failback against real clusters, real feeds and real consumers.

A group consumes part of a topic on dc-a and commits; dc-a's broker is killed; the same
consumer code pointed at dc-b resumes with zero records re-read and zero skipped (for
everything replicated). The translator runs as the coordinator leader would run it
(``TranslatorLoop``), behind the failover REST routes in a small app of the test's own;
the CLI talks to it like to a coordinator.

dc-a is stopped once per test and always started again in ``finally``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from fastapi import FastAPI
from typer.testing import CliRunner

from crossfeed.cli.main import app as cli
from crossfeed.client import TimestampedConsumer, user_headers
from crossfeed.client.rest import CoordinatorClient
from crossfeed.core.provenance import src_of
from crossfeed.feeds import FeedSpec, load_feed_file
from crossfeed.kafka import clients
from crossfeed.services.coordinator.failover import FailoverHooks, TranslatorLoop, make_router
from crossfeed.services.coordinator.rest_server import RestServer
from crossfeed.translation.kafka_io import shared_admin
from tests.support.verify import Record, read_many
from tests.support.wait import wait_for
from tests.support.workload import produce_mixed

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

TP = tuple[str, int]
FAST = {"coordinator": {"translate_interval_s": 0.5}}


# -- the coordinator's routes, in a small app of the test's own ----------------------------


@contextmanager
def failover_routes(clusters: Any, feeds: list[FeedSpec]) -> Iterator[tuple[str, TranslatorLoop]]:
    settings = clusters.settings(**FAST)
    loop = TranslatorLoop(settings)
    loop.sync(feeds)
    hooks = FailoverHooks(settings, translator=loop.translator, take_translator=loop.take)
    app = FastAPI()
    app.include_router(make_router(hooks))
    server = RestServer(app, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{server.port}", loop
    finally:
        server.stop()
        loop.stop()


def wrapped(config: dict[str, Any], group: str) -> TimestampedConsumer:
    """The consumer wrapper, configured like careful application code."""
    return TimestampedConsumer(
        {
            **config,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )


def crossfeed(*args: str) -> Any:
    """Run the CLI in-process; returns its JSON output."""
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def failover_cli(feed: Any, url: str) -> Any:
    """``crossfeed failover`` of a feed-file feed (tests.support Feed) against the routes
    at ``url``; its JSON report."""
    return crossfeed(
        *("--config", str(feed.config_file), "failover", "--feed", feed.name),
        *("--feed-file", str(feed.feed_file), "--server", url, "--json"),
    )


def reread_bounds(report: Any, group: str) -> dict[int, int]:
    """From a failover report with the source lost: ``reread_max`` per partition of
    ``group`` (which must be in it once)."""
    assert not report["source_reachable"]
    mine = [g for g in report["groups"] if g["group"] == group]
    assert len(mine) == 1, report["groups"]
    return {p["partition"]: p["position"]["reread_max"] for p in mine[0]["partitions"]}


# -- consumers ------------------------------------------------------------------------------


def consume(consumer: Any, quotas: dict[TP, int | None], timeout_s: float = 60.0) -> dict[TP, int]:
    """Consume until each partition reached its quota (None: its end), commit what was
    processed (synchronously, like careful consumer code), return the last offsets."""
    last: dict[TP, int] = {}
    count: dict[TP, int] = dict.fromkeys(quotas, 0)
    done: set[TP] = set()
    deadline = time.monotonic() + timeout_s
    while len(done) < len(quotas):
        assert time.monotonic() < deadline, f"consumed {count} of {quotas}"
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        tp = (msg.topic(), msg.partition())
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF and quotas.get(tp, 0) is None:
                done.add(tp)
            continue
        quota = quotas.get(tp, 0)
        if quota is not None and count[tp] >= quota:
            done.add(tp)
            continue
        count[tp] += 1
        last[tp] = msg.offset()
        if quota is not None and count[tp] >= quota:
            done.add(tp)
    offsets = [TopicPartition(t, p, o + 1) for (t, p), o in sorted(last.items())]
    consumer.commit(offsets=offsets, asynchronous=False)
    return last


def read_on(
    consumer: Any, tps: set[TP], idle_s: float = 2.0, timeout_s: float = 60.0
) -> dict[TP, list[Any]]:
    """Everything a subscribed consumer reads until every partition is at its end."""
    got: dict[TP, list[Any]] = {tp: [] for tp in tps}
    at_end: set[TP] = set()
    quiet_since = time.monotonic()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            if at_end >= tps and time.monotonic() - quiet_since > idle_s:
                return got
            continue
        quiet_since = time.monotonic()
        tp = (msg.topic(), msg.partition())
        if msg.error() is not None:
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(tp)
            continue
        at_end.discard(tp)
        got.setdefault(tp, []).append(msg)
    raise AssertionError(f"not at the end of {tps - at_end} after {timeout_s}s")


def src_offsets(messages: list[Any]) -> list[int]:
    """The source offsets the copies name in their provenance."""
    out = []
    for msg in messages:
        src = src_of(msg.headers() or [])
        out.append(src.offset if src else -1)
    return out


def committed(config: dict[str, Any], group: str, *, stable: bool = False) -> dict[TP, int]:
    """The group's committed offsets. ``stable``: as the translator reads them
    (require_stable), for groups that commit in transactions: without it the broker
    (Kafka 4.3.1) has answered offsets several transactional commits old, 30 s after
    those commits were complete in __consumer_offsets; a partition whose commit is
    still in an open transaction is left out."""
    admin = shared_admin(config).client()  # never dropped while a future completes
    request = [ConsumerGroupTopicPartitions(group)]
    listing = admin.list_consumer_group_offsets(request, require_stable=stable)[group].result(30)
    return {
        (tp.topic, tp.partition): tp.offset
        for tp in listing.topic_partitions or []
        if not stable or tp.error is None
    }


def expected_after(
    source: dict[TP, list[Record]], replicated: dict[TP, set[int]], offsets: dict[TP, int]
) -> dict[TP, list[int]]:
    """Per partition: the replicated source records at or after the committed offset."""
    return {
        tp: [r.offset for r in source[tp] if r.offset >= o and r.offset in replicated[tp]]
        for tp, o in offsets.items()
    }


def by_tp(found: dict[str, dict[int, list[Record]]]) -> dict[TP, list[Record]]:
    return {(t, p): rs for t, parts in found.items() for p, rs in parts.items()}


# -- failover -------------------------------------------------------------------------------


def test_failover_moves_every_kind_of_group_to_its_exact_record(
    clusters, services, topic_factory, unique, producer_factory
):
    a, b = clusters.a.config, clusters.b.config
    # A compacted topic first: the log cleaner takes ~15 s; the rest is set up meanwhile.
    compacted = topic_factory(
        clusters.a,
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
        },
    )
    producer = producer_factory(clusters.a)
    for i in range(200):
        producer.produce(compacted, key=f"k{i % 10}".encode(), value=f"v{i}".encode())
    producer.flush(10)
    g_compacted = unique("compacted")
    c = clients.consumer(a, **{"group.id": g_compacted})
    c.subscribe([compacted])
    consume(c, {(compacted, 0): 50})  # commits 50: compaction will leave it in a hole
    c.close()
    time.sleep(0.3)
    producer.produce(compacted, key=b"roll", value=b"roll")  # rolls the segment
    producer.flush(10)

    plain = topic_factory(clusters.a, partitions=3)
    produce_mixed(a, [plain], 3, 6000, seed=5)  # aborted transactions and commit markers
    parts = [(plain, p) for p in range(3)]
    groups = {name: unique(name) for name in ("head", "lag", "wrapped", "nocommit", "active")}
    quotas: dict[str, dict[TP, int | None]] = {
        "head": dict.fromkeys(parts),
        "lag": {tp: 300 + 200 * tp[1] for tp in parts},
        "wrapped": {tp: 1000 + 10 * tp[1] for tp in parts},
        "active": {tp: 100 for tp in parts},
    }
    positions: dict[str, dict[TP, int]] = {}
    for name, quota in quotas.items():
        consumer: Any = (
            wrapped(a, groups[name])
            if name == "wrapped"
            else clients.consumer(a, **{"group.id": groups[name], "enable.partition.eof": True})
        )
        consumer.subscribe([plain])
        positions[name] = consume(consumer, quota)
        consumer.close()
    nocommit = clients.consumer(a, **{"group.id": groups["nocommit"]})
    nocommit.subscribe([plain])
    for _ in range(20):
        nocommit.poll(0.2)
    nocommit.close()  # never committed

    # Compaction must have made the hole before the feed copies the topic.
    wait_for(
        "compaction of the test topic",
        lambda: len(read_many(a, [compacted])[compacted][0]) < 201,
        timeout_s=60,
    )
    feed = services.start_feed("failover", clusters, [plain, compacted], settings=FAST)
    spec = load_feed_file(feed.feed_file)
    source_now = by_tp(read_many(a, [plain, compacted]))
    wanted = sum(len(v) for v in source_now.values())
    read_many(b, [plain, compacted], expect=wanted, timeout_s=120)

    # The destination group "active" has a live member there: it must never be moved.
    active_b = clients.consumer(b, **{"group.id": groups["active"], "enable.partition.eof": True})
    active_b.subscribe([plain])
    active_seen = read_on(active_b, set(parts))
    active_b.commit(asynchronous=False)
    active_committed = committed(b, groups["active"])

    with failover_routes(clusters, [spec]) as (url, _loop):
        cli_args = ["--config", str(feed.config_file)]
        where = ["--feed", spec.name, "--feed-file", str(feed.feed_file), "--server", url, "--json"]

        def translated(group: str) -> Any:
            out = crossfeed(*cli_args, "groups", "translate", "--group", group, *where)
            done = out["partitions"] and all(p["exact"] for p in out["partitions"])
            if not done:
                print(f"not yet exact: {out}")  # shown if the wait fails
            return out if done else None

        for name in ("head", "lag", "wrapped"):
            out = wait_for(f"exact translation of {name}", lambda n=name: translated(groups[n]))
            assert {(p["topic"], p["partition"]) for p in out["partitions"]} == set(parts)
        wait_for("exact translation of the compacted group", lambda: translated(g_compacted))

        # Records dc-b will never get: the puller is frozen, a group reads past them.
        feed.pullers[0].pause()
        for i in range(25):
            producer.produce(plain, value=f"lost-{i}".encode(), partition=0)
        producer.flush(10)
        g_ahead = unique("ahead")
        ahead = wrapped(a, g_ahead)
        ahead.subscribe([plain])
        positions["ahead"] = consume(ahead, dict.fromkeys(parts))
        ahead.close()

        def frontier_seen() -> Any:
            out = crossfeed(*cli_args, "groups", "translate", "--group", g_ahead, *where)
            p0 = [p for p in out["partitions"] if p["partition"] == 0]
            return p0 and p0[0]["method"] == "frontier" and p0[0]["gap"] == 25

        wait_for("the translator to see records past the frontier", frontier_seen)
        time.sleep(1.5)  # a tick or two reads the new end offsets
        source = by_tp(read_many(a, [plain, compacted]))
        dc_a_commits = {name: committed(a, groups[name]) for name in ("lag", "wrapped")}

        clusters.stop("dc-a")
        try:
            feed.stop_all(hard=True)  # a feed-file feed: the operator stops its processes
            report = failover_cli(feed, url)
            assert report["stopped_by"] == "operator" and not report["source_reachable"]
            rows = {(r["topic"], r["partition"]): r for r in report["partitions"]}
            assert rows[(plain, 0)]["unreplicated"] == 25, rows
            assert all(r["unreplicated"] == 0 for tp, r in rows.items() if tp != (plain, 0)), rows
            assert report["unreplicated_records"] == 25
            assert report["rpo_seconds"] is not None and report["rpo_seconds"] >= 0
            assert groups["active"] in report["active"], json.dumps(report, indent=1)
            moved = set(report["moved"])
            assert {groups["head"], groups["lag"], groups["wrapped"], g_compacted} <= (
                moved | _already_there(report)
            )
            assert groups["nocommit"] not in {g["group"] for g in report["groups"]}
            # Position RPO: dc-a is gone, so no position is known to be the last commit;
            # each was read from dc-a's commit log (or the wrapper's timestamps) with its
            # commit time, and these groups, which stopped committing before, read nothing
            # again (checked below) — within every bound reported.
            position_rpo = [p["position"] for g in report["groups"] for p in g["partitions"]]
            assert position_rpo and all(p is not None for p in position_rpo), report["groups"]
            assert not any(p["last_commit"] for p in position_rpo)
            assert report["positions_stale"] == len(position_rpo)
            assert {p["known_from"] for p in position_rpo} <= {"commit-log", "consumer-timestamps"}
            assert all(p["commit_age_s"] is not None and p["reread_max"] >= 0 for p in position_rpo)

            # The same consumer code, pointed at dc-b.
            copies = by_tp(read_many(b, [plain, compacted]))
            replicated = {
                tp: set(src_offsets_of_records(records)) for tp, records in copies.items()
            }
            for name in ("head", "lag", "wrapped"):
                group_offsets = {tp: o + 1 for tp, o in positions[name].items()}
                if name != "head":
                    assert group_offsets == dc_a_commits[name]
                expected = expected_after(source, replicated, group_offsets)
                consumer = (
                    wrapped(b, groups[name])
                    if name == "wrapped"
                    else clients.consumer(
                        b, **{"group.id": groups[name], "enable.partition.eof": True}
                    )
                )
                consumer.subscribe([plain])
                got = read_on(consumer, set(parts))
                consumer.close()
                for tp in parts:
                    assert src_offsets(got[tp]) == expected[tp], (name, tp)
                    assert all(
                        user_headers(m) == user_headers(_source_of(source, tp, m))
                        for m in got[tp][:5]
                    )

            # The group that read past the frontier resumes at the frontier: nothing skipped.
            ahead_b = clients.consumer(b, **{"group.id": g_ahead, "enable.partition.eof": True})
            ahead_b.subscribe([plain])
            assert all(not msgs for msgs in read_on(ahead_b, set(parts)).values())
            ahead_b.close()

            # Compaction left the commit in a hole: resume at the next surviving record.
            comp = clients.consumer(b, **{"group.id": g_compacted, "enable.partition.eof": True})
            comp.subscribe([compacted])
            got = read_on(comp, {(compacted, 0)})[(compacted, 0)]
            comp.close()
            survivors = [r.offset for r in source[(compacted, 0)] if r.offset >= 50]
            assert src_offsets(got) == survivors and survivors[0] > 50

            # Never moved: a live member there; never created: no commits on dc-a.
            active_b.close()
            assert committed(b, groups["active"]) == active_committed
            assert sum(len(m) for m in active_seen.values()) > 0
            assert committed(b, groups["nocommit"]) == {}
        finally:
            clusters.start("dc-a")


def src_offsets_of_records(records: list[Record]) -> list[int]:
    out = []
    for r in records:
        src = src_of(r.headers)
        if src:
            out.append(src.offset)
    return out


def _source_of(source: dict[TP, list[Record]], tp: TP, msg: Any) -> Any:
    offset = src_offsets([msg])[0]
    return next(r for r in source[tp] if r.offset == offset).headers


def _already_there(report: dict[str, Any]) -> set[str]:
    """Groups the translator had already moved in an earlier tick (nothing left to do)."""
    return {
        g["group"]
        for g in report["groups"]
        if g["partitions"] and all(p["exact"] for p in g["partitions"])
    }


def test_failover_aborts_the_transaction_a_killed_puller_left_open(
    clusters, services, topic_factory, producer_factory
):
    """A puller killed mid-transaction leaves it open on dc-b, and read_committed readers
    of dc-b stop at its first record until the broker times it out (15 s after it began,
    up to 10 s more for the broker's sweep) — dc-b's own new writes included. Failover
    fences every puller task: the transaction is aborted at once."""
    topic = topic_factory(clusters.a, partitions=1)
    on_a = producer_factory(clusters.a)
    for i in range(100):
        on_a.produce(topic, value=f"a-{i}".encode())
    on_a.flush(10)
    # Transactions that stay open (the copies go out as they are read, uncommitted).
    slow = {
        **FAST,
        "puller": {"commit_interval_ms": 600_000, "backlog_commit_interval_ms": 600_000},
    }
    feed = services.start_feed("fence", clusters, [topic], settings=slow, wait=False)
    spec = load_feed_file(feed.feed_file)
    b = clusters.b.config

    def read(isolation: str) -> list[bytes]:
        try:
            got = read_many(b, [topic], timeout_s=2, isolation=isolation)
        except Exception:  # the target topic may not exist yet
            return []
        return [r.value or b"" for rs in got[topic].values() for r in rs]

    wait_for("copies in an open transaction", lambda: len(read("read_uncommitted")) == 100)
    opened = time.monotonic()  # the transaction began before this
    feed.stop_all(hard=True)
    assert read("read_committed") == []
    with failover_routes(clusters, [spec]) as (url, _loop):
        report = failover_cli(feed, url)
    assert report["fenced_tasks"] == spec.config.staging_partitions, report
    # Never copied (aborted), so all of it is the RPO, although the feed had no copy of
    # the partition at all: the translator lists the topics the feed selects.
    assert report["unreplicated_records"] == 100, report["partitions"]
    on_b = producer_factory(clusters.b)
    on_b.produce(topic, value=b"b-0")
    on_b.flush(10)
    visible = wait_for("dc-b's own write, read_committed", lambda: read("read_committed"), 10)
    # Before the broker could have aborted it on its own: failover did.
    assert time.monotonic() - opened < 14, time.monotonic() - opened
    assert visible == [b"b-0"]


# -- failback -------------------------------------------------------------------------------


def test_failback_returns_the_group_to_the_exact_record_and_copies_nothing_back(
    clusters, services, topic_factory, unique, producer_factory
):
    a, b = clusters.a.config, clusters.b.config
    topic = topic_factory(clusters.a, partitions=2)
    parts = [(topic, 0), (topic, 1)]
    on_a = producer_factory(clusters.a)
    for i in range(400):
        on_a.produce(topic, value=f"a-{i % 2}-{i // 2}".encode(), partition=i % 2)
    on_a.flush(10)
    feed = services.start_feed("back", clusters, [topic], settings=FAST)
    spec = load_feed_file(feed.feed_file)
    read_many(b, [topic], expect=400, timeout_s=60)
    group = unique("g")

    with failover_routes(clusters, [spec]) as (url, loop):
        api = CoordinatorClient(url, timeout_s=300)
        consumer = wrapped(a, group)
        consumer.subscribe([topic])
        consume(consumer, dict.fromkeys(parts, 150))
        consumer.close()

        def exact() -> bool:
            out = api.request(
                "POST",
                f"/v1/groups/{group}/translate",
                {"feed": spec.name, "feed_spec": _spec_body(spec)},
            )
            return len(out["partitions"]) == 2 and all(p["exact"] for p in out["partitions"])

        wait_for("exact translation", exact)
        # Extra data: written on dc-a, never replicated before dc-a is lost.
        feed.pullers[0].pause()
        for i in range(10):
            on_a.produce(topic, value=f"extra-{i}".encode(), partition=0)
        on_a.flush(10)

        def extras_seen() -> bool:  # the translator has listed the new end offsets
            translator = loop.translator(spec.name)
            rows = translator.rpo() if translator is not None else []
            return sum(r.unreplicated for r in rows if r.unreplicated > 0) == 10

        wait_for("the translator seeing the extra data", extras_seen)
        clusters.stop("dc-a")
        try:
            feed.stop_all(hard=True)
            failed = api.request(
                "POST", "/v1/failover", {"feed": spec.name, "feed_spec": _spec_body(spec)}
            )
            assert failed["unreplicated_records"] == 10, failed
            # On dc-b: the group reads the rest of the copies, dc-b takes new writes, the
            # group reads five of them per partition and stops.
            on_b = producer_factory(clusters.b)
            for i in range(30):
                on_b.produce(topic, value=f"b-{i % 2}-{i // 2}".encode(), partition=i % 2)
            on_b.flush(10)
            consumer = wrapped(b, group)
            consumer.subscribe([topic])
            last = consume(consumer, dict.fromkeys(parts, 50 + 5))
            consumer.close()
            values_b = by_tp(read_many(b, [topic]))
            for tp in parts:
                read = [r for r in values_b[tp] if r.offset <= last[tp]]
                assert read[-1].value == f"b-{tp[1]}-4".encode()
        finally:
            clusters.start("dc-a")

        reverse = services.start_feed(
            "back-rev",
            clusters,
            [topic],
            source="dc-b",
            target="dc-a",
            pullers=0,
            settings=FAST,
        )
        body = {
            "feed": spec.name,
            "feed_spec": _spec_body(spec),
            "replay_extra": True,
            "reverse_feed": reverse.name,
        }
        first = api.request("POST", "/v1/failback", body)
        assert first["extra_records"] == 10 and first["replayed_records"] == 10
        assert first["reverse"]["action"] == "start-it" and first["reverse"]["positions_seeded"]
        assert group in first["waiting"]  # what it read on dc-b is not on dc-a yet
        reverse.add_puller()
        second = api.request("POST", "/v1/failback", {**body, "wait_s": 60})
        assert second["extra_records"] == 0 and second["reverse"]["caught_up"], second
        assert second["moved"].get(group) == 2 and not second["waiting"], second

    # dc-a holds its own records, its extra data and dc-b's new writes: nothing of its
    # own came back, and dc-b holds the replayed extra data once.
    on_dc_a = read_many(a, [topic], expect=440, timeout_s=60)[topic]
    values = [r.value for rs in on_dc_a.values() for r in rs]
    assert len(values) == 440 and len(set(values)) == 440
    came_back = [
        r
        for rs in on_dc_a.values()
        for r in rs
        if r.value.startswith((b"a-", b"extra-")) and r.headers
    ]
    assert not came_back
    on_dc_b = [r.value for rs in read_many(b, [topic])[topic].values() for r in rs]
    assert sorted(v for v in on_dc_b if v.startswith(b"extra-")) == sorted(
        f"extra-{i}".encode() for i in range(10)
    )
    # The group returns to dc-a at the exact record: dc-b's sixth new write per partition.
    consumer = clients.consumer(a, **{"group.id": group, "enable.partition.eof": True})
    consumer.subscribe([topic])
    got = read_on(consumer, set(parts))
    consumer.close()
    for tp in parts:
        assert [m.value() for m in got[tp]] == [f"b-{tp[1]}-{i}".encode() for i in range(5, 15)]


def _spec_body(spec: FeedSpec) -> dict[str, Any]:
    data = spec.model_dump(by_alias=True, exclude_unset=True)
    data["config"] = spec.config.model_dump(by_alias=True, exclude_unset=True)
    return data
