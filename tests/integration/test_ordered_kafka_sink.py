"""The ordered-feed sink into Kafka against real brokers (docs/ordered-feeds.md §4).

The sorted stream is written by hand in the sorter's format (tests/support/sorted_stream.py),
so replays and cut-short transactions happen exactly when the test says; the sink runs as a
real ``crossfeed sink run`` process.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from confluent_kafka import TopicPartition

from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.services.sink.sorted_stream import Applied, Position
from crossfeed.wire import headers, ids, topics
from tests.support.sorted_stream import Change, SortedWriter, Txn, applying
from tests.support.verify import Record

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

FAST = {"sink": {"commit_interval_ms": 50}, "coordinator": {"failover_timeout_s": 6}}
# An hour ago: the sink writes these commit times as the target records' timestamps, and a
# target with the broker's time retention (7 days) would lose older ones at its next
# retention check (a 2023 base made a test's reader find offset 0 gone, now and then).
BASE_TS = int(time.time() - 3600) * 1_000_000


def _txns(n: int, seed: int, first: int = 0) -> list[Txn]:
    rng = random.Random(seed)
    out = []
    for i in range(first, first + n):
        size = rng.choice([1, 1, 2, 3, 5, 8])
        changes = tuple(
            Change(
                f"k{i}-{j}".encode(), f"v{i}-{j}".encode() * rng.randint(1, 5), (("user", b"u"),)
            )
            for j in range(size)
        )
        out.append(Txn(f"t{i:07d}", BASE_TS + i * 10, changes))
    return out


def _start(services, clusters, name: str, target: str, **kwargs):
    feed = services.start_feed(
        name,
        clusters,
        ["unused"],
        mode="ordered",
        pullers=0,
        sink_uri=f"kafka://{clusters.b.alias}/{target}",
        settings=FAST,
        **kwargs,
    )
    return feed


def _read_all(clusters, topic: str, expect: int, timeout_s: float = 90.0) -> list[Record]:
    consumer = clients.consumer(clusters.b.config, **{"group.id": f"check-{time.time_ns()}"})
    consumer.assign([clients_tp(topic)])
    out: list[Record] = []
    deadline = time.monotonic() + timeout_s
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        msgs = consumer.consume(1000, 0.5)
        for msg in msgs:
            if not msg.error():
                out.append(Record.from_message(msg))
        if msgs:
            quiet_since = time.monotonic()
        elif len(out) >= expect and time.monotonic() - quiet_since > 2.0:
            break
    consumer.close()
    return out


def clients_tp(topic: str):
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, 0, 0)


def _expected(txns: list[Txn]) -> list[tuple[bytes | None, bytes | None, bytes]]:
    return [
        (c.key, c.value, f"{t.txn_id}/{seq}/{len(t.changes)}".encode())
        for t in txns
        for seq, c in enumerate(t.changes, 1)
    ]


def _got(records: list[Record]) -> list[tuple[bytes | None, bytes | None, bytes]]:
    return [(r.key, r.value, r.header(headers.TXN) or b"") for r in records]


def _assert_same(records: list[Record], txns: list[Txn]) -> None:
    got, want = _got(records), _expected(txns)
    if got != want:
        first = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
        raise AssertionError(
            f"target holds {len(got)} records, expected {len(want)}; first difference at "
            f"{first}: got {got[first] if first is not None and first < len(got) else None}, "
            f"want {want[first] if first is not None and first < len(want) else None}"
        )


@pytest.mark.parametrize("form", ["inline", "framed"])
def test_in_order_replays_and_cut_short_dropped(clusters, services, topic_factory, unique, form):
    """Either form of a transaction (docs/ordered-feeds.md §3: a stream written before the
    inline form is read as well)."""
    target = unique("ordered")
    txns = _txns(40, seed=1)
    feed = _start(services, clusters, f"okafka-{form}", target)
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name), form)
    partial = 0  # transactions cut short in the stream (inline: records stop before the end)

    def cut(t: Txn, after: int) -> None:
        nonlocal partial
        writer.txn(t, cut_after=after)
        partial += form == "framed" or 0 < after < len(t.changes)

    for t in txns[:10]:
        writer.txn(t)
    writer.resolved(txns[9].commit_ts + 5)
    for t in txns[5:10]:  # the sorter replays a suffix after a crash
        writer.txn(t)
    cut(txns[10], len(txns[10].changes) - 1 or 0)  # cut short ...
    for t in txns[10:20]:  # ... and its complete copy follows
        writer.txn(t)
    cut(txns[20], 0)  # a begin alone (inline: nothing)
    writer.txn(txns[20])
    writer.resolved(txns[20].commit_ts)
    multi = next(i for i in range(21, 30) if len(txns[i].changes) > 1)
    for i, t in enumerate(txns[21:30], 21):
        if i == multi:
            cut(t, 1)  # its first change alone
        writer.txn(t)
    cut(txns[30], len(txns[30].changes))  # all its data (framed: no commit; inline: whole)
    for t in txns[30:]:
        writer.txn(t)
    final_r = txns[-1].commit_ts + 1
    writer.resolved(final_r)
    writer.flush()

    sink = feed.sinks[0]
    status = sink.wait_status(
        lambda s: s["checkpoint_ts_us"] == final_r, 60, f"at checkpoint_ts {final_r}"
    )
    assert status["applied"] == f"{txns[-1].commit_ts}/{txns[-1].txn_id}"
    records = _read_all(clusters, target, len(_expected(txns)))
    _assert_same(records, txns)
    # key, value, timestamp as on the source; user headers and the ordering headers kept
    first = records[0]
    assert first.header("user") == b"u"
    assert first.header(headers.COMMIT_TS) == str(txns[0].commit_ts).encode()
    assert first.timestamp_ms == txns[0].commit_ts // 1000
    assert first.header(headers.ORDER) is None and first.header(headers.TIMESTAMP) is None
    meta = clients.admin(clusters.b.config).list_topics(target, timeout=10).topics[target]
    assert len(meta.partitions) == 1
    assert partial >= (4 if form == "framed" else 1)
    assert (sink.metric("crossfeed_sink_cut_short_transactions_total") or 0) >= partial
    assert (sink.metric("crossfeed_sink_replayed_transactions_total") or 0) >= 5
    assert sink.metric("crossfeed_sink_source_transactions_total") == len(txns)
    assert (sink.metric("crossfeed_sink_transaction_commit_seconds_count") or 0) > 0
    assert sink.metric("crossfeed_sink_feed_checkpoint_timestamp_seconds") == pytest.approx(
        final_r / 1e6
    )


def test_kill_9_mid_stream_nothing_lost_or_duplicated_never_partial(
    clusters, services, topic_factory, unique
):
    target = unique("ordered")
    txns = _txns(30_000, seed=2)
    feed = _start(services, clusters, "okill", target)
    sink = feed.sinks[0]
    # both forms of a transaction, as after a sorter upgraded mid-stream
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name), "mixed", seed=3)
    rng = random.Random(5)

    # A read_committed reader, while the feed runs: whenever it has caught up, what it
    # has read ends on a whole source transaction.
    partial: list[str] = []
    seen = [0]
    done = threading.Event()

    def read() -> None:
        consumer = clients.consumer(clusters.b.config, **{"group.id": f"watch-{time.time_ns()}"})
        consumer.assign([clients_tp(target)])
        last: bytes | None = None
        while not done.is_set():
            msgs = consumer.consume(500, 0.2)
            for msg in msgs:
                if not msg.error():
                    last = dict(msg.headers() or []).get(headers.TXN)
                    seen[0] += 1
            if not msgs and last is not None:
                _, seq, count = last.decode().rsplit("/", 2)
                if seq != count:
                    partial.append(last.decode())
        consumer.close()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    kills = 0
    killed_at: list[int] = []
    for i, t in enumerate(txns):
        if rng.random() < 0.02:
            writer.txn(t, cut_after=rng.randint(0, len(t.changes)))
        if rng.random() < 0.01 and i > 10:  # a replayed suffix
            for old in txns[max(0, i - rng.randint(1, 10)) : i]:
                writer.txn(old)
        writer.txn(t)
        if i % 50 == 49:
            writer.resolved(t.commit_ts)
        if i in (12_000, 26_000):
            writer.flush()
            # kill -9 once the sink is well into what was written
            halfway = txns[i // 2].commit_ts
            status = sink.wait_status(lambda s, h=halfway: s["applied_commit_ts_us"] >= h, 60)
            sink.restart(hard=True)
            kills += 1
            killed_at.append(status["applied_commit_ts_us"])
    final_r = txns[-1].commit_ts
    writer.resolved(final_r)
    writer.flush()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == final_r, 120, f"at checkpoint {final_r}")
    records = _read_all(clusters, target, len(_expected(txns)))
    done.set()
    reader.join(10)
    _assert_same(records, txns)
    assert kills == 2 and sink.exit_codes == [-9, -9]
    assert not partial, f"a read_committed reader saw partial transactions: {partial[:5]}"
    assert seen[0] > 0
    # at least one kill came before the sink had applied everything written then
    assert killed_at[0] < txns[12_000].commit_ts or killed_at[1] < txns[26_000].commit_ts


def test_consistency_ts_published_by_the_coordinator(
    clusters, services, unique, tmp_path_factory
) -> None:
    from crossfeed.client.rest import CoordinatorClient
    from tests.integration.test_coordinator_process import coordinator_group, wait_for

    target = unique("ordered")
    txns = _txns(20, seed=3)
    feed = _start(services, clusters, "ocons", target)
    group = coordinator_group(clusters, tmp_path_factory.mktemp("ocons"), 1, token=None)
    coordinators = next(group)
    try:
        url = coordinators.leader().url
        with CoordinatorClient(url) as api:
            api.create_feed(feed.spec)
            writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
            for t in txns:
                writer.txn(t)
            final_r = txns[-1].commit_ts + 3
            writer.resolved(final_r)
            writer.flush()

            def published() -> dict | None:
                row = next(f for f in api.status() if f["name"] == feed.name)
                return row if row["consistency_ts_us"] == final_r else None

            row = wait_for(published, 60, f"consistency_ts {final_r} published")
            assert row["checkpoint_ts_us"] == final_r
            assert feed.sinks[0].instance in row["sinks"]
            api.remove_feed(feed.name)
    finally:
        next(group, None)


def test_too_large_and_bad_markers_to_the_dlq_and_a_standby_takes_over(
    clusters, services, topic_factory, unique
):
    """A record over the target's max.message.bytes, a marker and an inline record breaking
    the contract go to the DLQ with context; with two instances one applies, and after
    kill -9 of it the other goes on from the committed position."""
    from crossfeed.dlq import ERROR_CLASS, FEED
    from tests.support.verify import read_many

    target = topic_factory(clusters.b, config={"max.message.bytes": "2000"})
    feed = _start(services, clusters, "odlq", target, sinks=2)
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
    big = Change(b"big", b"x" * 5000)
    txns = _txns(10, seed=4)
    writer.txn(txns[0])
    writer.txn(Txn("t-big", txns[0].commit_ts + 1, (Change(b"ok", b"v"), big)))
    writer._send(None, None, [(headers.TYPE, b"begin"), (headers.COMMIT_TS, b"nope")])
    writer._send(b"bad", b"v", [(headers.ORDER, b"0/1/5/t")])  # an inline seq 0
    for t in txns[1:5]:
        writer.txn(t)
    writer.resolved(txns[4].commit_ts)
    writer.flush()

    first = applying(feed.sinks)
    first.wait_status(lambda s: s["checkpoint_ts_us"] == txns[4].commit_ts, 60, "applied")
    first.kill()
    for t in txns[5:]:
        writer.txn(t)
    writer.resolved(txns[-1].commit_ts)
    writer.flush()
    second = next(s for s in feed.sinks if s is not first)
    second.wait_status(lambda s: s["checkpoint_ts_us"] == txns[-1].commit_ts, 60, "taken over")
    records = _read_all(clusters, target, 1)
    keys = [r.key for r in records]
    want = [c.key for t in txns[:1] for c in t.changes] + [b"ok"]
    want += [c.key for t in txns[1:] for c in t.changes]
    assert keys == want
    letters = [
        r
        for part in read_many(clusters.b.config, [topics.DLQ])[topics.DLQ].values()
        for r in part
        if r.header(FEED) == feed.name.encode()
    ]
    assert sorted(r.header(ERROR_CLASS) for r in letters) == [
        b"BadMarker",
        b"BadMarker",
        b"RecordTooLarge",
    ]


@pytest.mark.parametrize(
    ("applied", "committed"),
    [(8, 5), (5, 8)],
    ids=["position-past-the-target", "target-past-the-position"],
)
def test_the_applied_position_is_checked_against_the_target(
    clusters, services, unique, applied: int, committed: int
):
    """A Kafka transaction was once seen committed on one partition and aborted on another
    after a single broker was killed mid-commit. Both splits of the sink's transaction
    (its input offset with the applied position, its records in the target) are written
    here as an earlier owner would have left them; the sink must still leave each source
    transaction in the target once, in order."""
    target = unique("ordered")
    txns = _txns(12, seed=5)
    feed = _start(services, clusters, "ocheck", target, sinks=0, wait=False)
    sorted_topic = topics.sorted_(feed.name)
    writer = SortedWriter(clusters.b.config, sorted_topic)
    for t in txns:
        writer.txn(t)
    writer.resolved(txns[-1].commit_ts + 1)
    writer.flush()

    kafka_topics.ensure_topic(clients.admin(clusters.b.config), target, 1)
    earlier = clients.transactional_producer(clusters.b.config, f"earlier-{feed.name}")

    def write(some: list[Txn]) -> None:
        for t in some:
            for seq, change in enumerate(t.changes, 1):
                hdrs = [
                    *change.headers,
                    (headers.COMMIT_TS, str(t.commit_ts).encode()),
                    (headers.TXN, f"{t.txn_id}/{seq}/{len(t.changes)}".encode()),
                ]
                earlier.produce(target, change.value, change.key, partition=0, headers=hdrs)

    earlier.begin_transaction()
    write(txns[:committed])
    earlier.commit_transaction(30)
    if applied > committed:
        earlier.begin_transaction()
        write(txns[committed:applied])
        assert earlier.flush(30) == 0
        earlier.abort_transaction(30)
    # the input offset after txns[applied - 1]'s last record (inline), with its position
    after = sum(len(t.changes) for t in txns[:applied])
    last = txns[applied - 1]
    position = Applied(Position(last.commit_ts, last.txn_id))
    group = clients.consumer(clusters.b.config, **{"group.id": ids.sink_group(feed.name)})
    group.commit(
        offsets=[TopicPartition(sorted_topic, 0, after, metadata=position.encode())],
        asynchronous=False,
    )
    group.close()

    sink = feed.add_sink()
    feed.wait_ready()
    sink.wait_status(
        lambda s: s["applied"] == f"{txns[-1].commit_ts}/{txns[-1].txn_id}", 60, "all applied"
    )
    _assert_same(_read_all(clusters, target, len(_expected(txns))), txns)
    assert "the applied position says" in sink.log_path.read_text()


def test_history_older_than_the_targets_retention_is_named_in_the_log(
    clusters, services, topic_factory, unique
):
    """Target records keep their source timestamps, so the broker's time retention counts
    from them: the sink says so when it writes records older than the target's
    retention.ms, and stays quiet for a target that keeps everything."""
    day_ms = 86_400_000
    two_days_ago = int(time.time() - 2 * 86_400) * 1_000_000
    old = [Txn(t.txn_id, two_days_ago + i, t.changes) for i, t in enumerate(_txns(5, seed=6))]
    feeds = {}
    for retention in (str(day_ms), "-1"):
        target = topic_factory(clusters.b, config={"retention.ms": retention})
        feed = _start(services, clusters, f"oret{retention.strip('-')}", target)
        writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
        for t in old:
            writer.txn(t)
        writer.resolved(old[-1].commit_ts)
        writer.flush()
        feeds[retention] = feed
    for retention, feed in feeds.items():
        sink = applying(feed.sinks)
        sink.wait_status(lambda s: s["checkpoint_ts_us"] == old[-1].commit_ts, 60, "applied")
        warned = "older than the retention.ms" in sink.log_text()
        assert warned == (retention != "-1"), (retention, sink.log_tail(20))
