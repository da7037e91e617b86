"""Ordered feeds, the front half against real brokers: the change producer's watermarks and
the puller's ``_crossfeed.<feed>.changes`` (docs/ordered-feeds.md §1-2).

The puller runs as a real process (``crossfeed puller run``), no sink: the tests read the
staging topic itself.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import defaultdict

import pytest

from crossfeed import dlq
from crossfeed.client.producer import ChangeProducer, row_change
from crossfeed.core.partitions import staging_partition
from crossfeed.core.timestamps import parse_commit_ts
from crossfeed.kafka import clients
from crossfeed.wire import codec, headers, topics
from crossfeed.wire.changes import decode_change, parse_txn
from crossfeed.workload.bank import ACCOUNTS
from crossfeed.workload.run import run_bank
from tests.support.bank import verify_bank
from tests.support.verify import Record, flatten, read_many

pytestmark = [pytest.mark.integration]

RESOLVED = headers.TYPE_RESOLVED.encode()


def _is_mark(record: Record) -> bool:
    return record.header(headers.TYPE) == RESOLVED


def _ts(record: Record) -> int:
    return parse_commit_ts(record.header(headers.COMMIT_TS))


def _commit_order(record: Record) -> tuple[int, str, int]:
    """The sorter's release order: (commit_ts, txn id, seq)."""
    ref = parse_txn(record.header(headers.TXN))
    return (_ts(record), ref.txn, ref.seq)


@pytest.mark.parametrize("transactional", [False, True])
def test_producer_watermarks_reach_every_partition_including_idle_ones(
    clusters, topic_factory, unique, transactional
):
    topic = topic_factory(clusters.a, partitions=4)
    config = dict(clusters.a.config)
    if transactional:
        config["transactional.id"] = unique("changes")
    with ChangeProducer(config, resolved_interval_s=0.2) as producer:
        for balance in range(5):  # changes to partition 0 only: 1-3 stay idle
            event = ACCOUNTS.update(None, {"id": 7, "balance": balance})
            producer.transaction([row_change(topic, event, partition=0)])
        time.sleep(1.5)
    last = producer.last_commit_ts_us

    by_partition = read_many(clusters.a.config, [topic])[topic]
    assert sorted(by_partition) == [0, 1, 2, 3]
    for partition, records in by_partition.items():
        marks = [r for r in records if _is_mark(r)]
        # The first watermark precedes everything, then one per tick (~0.2 s).
        assert records and _is_mark(records[0]), partition
        assert len(marks) >= 4, (partition, len(marks))
        stamps = [_ts(m) for m in marks]
        assert stamps == sorted(stamps), partition
        assert stamps[-1] >= last, partition  # idle partitions advance past the changes
        for mark in marks:
            value = codec.decode("ResolvedMark", mark.value)
            assert (value["topic"], value["partition"], value["next_offset"]) == (
                topic,
                partition,
                -1,
            )
            assert value["resolved_ts_us"] == _ts(mark)
        # The promise: no change after a watermark at or below it.
        promised = 0
        for record in records:
            if _is_mark(record):
                promised = max(promised, _ts(record))
            else:
                assert _ts(record) > promised, (partition, record.offset)
    data = [r for r in by_partition[0] if not _is_mark(r)]
    assert [decode_change(r.value).after for r in data] == [
        {"id": 7, "balance": b} for b in range(5)
    ]
    assert all(r.key == b"7" for r in data)


def _staging(clusters, feed, expect_data, marks_past=None, timeout_s=120.0):
    """The staging topic's records by staging partition, once ``expect_data`` data
    records are there (marks come on top) and the marks of each source partition named
    in ``marks_past`` ("topic/partition" -> µs) have passed that time."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = read_many(clusters.b.config, [feed.changes_topic], expect=1, timeout_s=30)
        by_partition = found.get(feed.changes_topic, {})
        data = sum(1 for r in flatten(by_partition) if not _is_mark(r))
        newest: dict[str, int] = {}
        for r in flatten(by_partition):
            if _is_mark(r):
                mark = codec.decode("ResolvedMark", r.value)
                where = f"{mark['topic']}/{mark['partition']}"
                newest[where] = max(newest.get(where, 0), mark["resolved_ts_us"])
        passed = all(newest.get(w, 0) >= ts for w, ts in (marks_past or {}).items())
        if (data >= expect_data and passed) or time.monotonic() > deadline:
            return by_partition
        time.sleep(1.0)


def test_ordered_puller_stages_one_record_per_change_with_marks_that_never_go_back(
    clusters, services, topic_factory, unique
):
    bank_topic = unique("bank")
    plain = topic_factory(clusters.a, partitions=2)  # no watermarks: the fallback rule
    feed = services.start_feed(
        "ordered-front",
        clusters,
        [bank_topic, plain],
        mode="ordered",
        sink_uri=f"kafka://{clusters.b.alias}/{unique('out')}",
        sinks=0,
        config={"staging.partitions": 3, "lateness.ms": 0},
        settings={"puller": {"resolved_interval_ms": 100, "topic_refresh_s": 0.5}},
    )
    puller = feed.pullers[0]

    result: dict[str, object] = {}

    def work() -> None:
        result["summary"], _ = run_bank(
            clusters.a.config,
            bank_topic,
            accounts=40,
            partitions=4,
            rate=400,
            seconds=8,
            skew_partition=1,
            skew_ms=700,
            resolved_interval_s=0.1,
        )

    writer = threading.Thread(target=work)
    writer.start()
    producer = clients.producer(clusters.a.config)
    for i in range(20):  # plain records: no commit-ts header, one with a user header
        hdrs = [("app", b"x")] if i % 2 else None
        producer.produce(plain, key=f"k{i}".encode(), value=b"v", partition=i % 2, headers=hdrs)
    producer.flush(10)
    # every bank partition has sent a watermark (the skewed one 700 ms late), the plain
    # topic's marks come from the fallback rule; under load this takes a few seconds
    before = puller.wait_status(
        lambda s: (
            all(s["partitions"].get(f"{bank_topic}/{p}", {}).get("watermarked") for p in range(4))
            and f"{plain}/1" in s["partitions"]
        ),
        60,
        "every bank partition watermarked",
    )["partitions"]
    assert before[f"{bank_topic}/1"]["watermarked"]
    puller.kill()  # kill -9 mid-run, then a new owner of every task
    puller.start()
    after = puller.wait_status(lambda s: set(s["partitions"]) >= set(before), 60, "restarted")
    for where, state in before.items():  # restored from the newest marks, not from 0
        assert after["partitions"][where]["resolved_ts_us"] >= state["resolved_ts_us"], where
    writer.join()
    summary = result["summary"]
    assert summary.transactions > 1000  # type: ignore[attr-defined]
    expected_data = summary.events + 20  # type: ignore[attr-defined]

    source = read_many(clusters.a.config, [bank_topic, plain])
    source_records = {
        (r.topic, r.partition, r.offset): r for r in flatten(source) if not _is_mark(r)
    }
    source_id, n = clusters.a.cluster_id, 3
    final = headers.WATERMARK_FINAL.encode()
    closed_at = {  # source partition -> the final watermark its producer wrote at close
        f"{r.topic}/{r.partition}": _ts(r)
        for r in flatten(source)
        if _is_mark(r) and r.header(headers.WATERMARK) == final
    }
    by_staging = _staging(clusters, feed, expected_data, marks_past=closed_at)

    copies: dict[tuple[str, int, int], Record] = {}
    last_mark: dict[str, int] = {}
    for s, records in by_staging.items():
        promised: dict[str, int] = defaultdict(int)  # source partition -> resolved so far
        # the bank's producer closed at the end (a final watermark): its partitions follow
        # the clock from then on, never back to watermarks
        on_clock: set[str] = set()
        for record in records:
            if _is_mark(record):
                value = codec.decode("ResolvedMark", record.value)
                where = f"{value['topic']}/{value['partition']}"
                assert record.key == where.encode()
                assert staging_partition(value["topic"], value["partition"], n) == s
                resolved = _ts(record)
                assert resolved == value["resolved_ts_us"]
                assert resolved >= promised[where], f"{where} went back at {record.offset}"
                promised[where] = resolved
                last_mark[where] = resolved
                from_watermarks = record.header(headers.RESOLVED_FROM) == b"watermarks"
                if value["topic"] == bank_topic and not from_watermarks and resolved:
                    # only once the producer has gone: none of its changes follows (the
                    # mark may stay below its final watermark until the next topic
                    # listing; the last mark passes it, checked below)
                    on_clock.add(where)
                expected_from = value["topic"] == bank_topic and where not in on_clock
                assert from_watermarks == expected_from or resolved == 0
                continue
            src = record.header(headers.PROV).decode().split("/")  # a first hop
            topic, partition, offset = src[1], int(src[2]), int(src[3])
            where = f"{topic}/{partition}"
            assert src[0] == source_id
            assert where not in on_clock, f"{src} after its producer's final watermark"
            assert staging_partition(topic, partition, n) == s
            assert (topic, partition, offset) not in copies, f"duplicate {src}"
            copies[(topic, partition, offset)] = record
            assert _ts(record) > promised[where], f"{src} below an earlier mark"
            assert record.header(headers.TYPE) is None
    # One staging record per source change, byte for byte, provenance stamped.
    assert sorted(copies) == sorted(source_records)
    for where, copy in copies.items():
        original = source_records[where]
        assert (copy.key, copy.value, copy.timestamp_ms) == (
            original.key,
            original.value,
            original.timestamp_ms,
        )
        prov = f"{source_id}/{where[0]}/{where[1]}/{where[2]}".encode()
        assert copy.header(headers.PROV) == prov
        assert not any(name in headers.LEGACY_PROVENANCE for name, _ in copy.headers)
        if where[0] == bank_topic:
            assert copy.header(headers.COMMIT_TS) == original.header(headers.COMMIT_TS)
            assert parse_txn(copy.header(headers.TXN)).count in (2, 40)
        else:
            assert _ts(copy) == original.timestamp_ms * 1000  # added from the timestamp
            assert copy.user_headers == original.user_headers
    # The headers alone put the changes back in commit order, whole transactions: what
    # the sorter does, here by sorting everything (the workload is done, all resolved).
    bank_changes = [r for where, r in sorted(copies.items()) if where[0] == bank_topic]

    verify_bank(sorted(bank_changes, key=_commit_order), summary).assert_ok()
    # Every partition of the bank topic resolved up to the final watermark (the clock
    # after the last change), idle or skewed alike.
    for partition in range(4):
        where = f"{bank_topic}/{partition}"
        assert last_mark[where] >= summary.last_commit_ts  # type: ignore[attr-defined]
        assert last_mark[where] >= closed_at[where], where
    assert puller.alive


def test_bank_workload_cli_summary_and_what_a_sorter_would_release_checks_out(clusters, unique):
    """The CLI's JSON line, and the source records put in (commit_ts, txn, seq) order — what
    the sorter releases — pass the ordered-target checker with the expected balances."""
    topic = unique("bank-cli")
    bootstrap = clusters.a.config["bootstrap.servers"]
    command = [sys.executable, "-m", "crossfeed.cli.main", "workload", "bank", "--topic", topic]
    command += ["--accounts", "30", "--rate", "0", "--transactions", "3000", "--partitions", "5"]
    command += ["--bootstrap", bootstrap, "--skew-partition", "2", "--skew-ms", "300"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert (summary["transactions"], summary["events"], summary["initial_total"]) == (
        3001,
        30 + 2 * 3000,
        30 * 1000,
    )
    assert summary["skew_partition"] == 2 and summary["last_commit_ts"] > 0

    records = [r for r in flatten(read_many(clusters.a.config, [topic])) if not _is_mark(r)]
    assert len(records) == summary["events"]
    by_partition = defaultdict(set)
    for record in records:
        event = decode_change(record.value)
        by_partition[event.key["id"] % 5].add(record.partition)
    assert all(parts == {p} for p, parts in by_partition.items())  # rows stay in place

    released = sorted(records, key=_commit_order)
    verify_bank(released, summary).assert_ok()
    damaged = released[:100] + released[101:]
    assert not verify_bank(damaged, summary).ok


def test_bank_workload_built_ahead_writes_the_same_run_at_its_pace(clusters, unique):
    """``build_ahead`` (benchmarks): the transfers are encoded before the clock starts; what
    is written is still a whole bank run at the rate asked, ending in the balances the
    summary's bank expects."""
    topic = unique("bank-ahead")
    summary, bank = run_bank(
        clusters.a.config, topic, accounts=20, partitions=4, rate=500, seconds=3,
        build_ahead=True,
    )  # fmt: skip
    assert 1200 <= summary.transactions - 1 <= 1501  # 500/s for 3 s, paced
    assert summary.seconds >= 2.9  # paced for the seconds asked
    records = [r for r in flatten(read_many(clusters.a.config, [topic])) if not _is_mark(r)]
    assert len(records) == summary.events == 20 + 2 * (summary.transactions - 1)
    released = sorted(records, key=_commit_order)
    verify_bank(released, summary, bank.expected_balances()).assert_ok()


def test_ordered_puller_dead_letters_late_and_malformed_changes_and_stages_big_ones(
    clusters, services, topic_factory, unique
):
    topic = topic_factory(clusters.a, partitions=1, config={"max.message.bytes": "8388608"})
    producer = clients.producer(
        clusters.a.config, **{"message.max.bytes": 9 << 20, "compression.type": "none"}
    )
    ts = str(int(time.time() * 1_000_000)).encode()

    def send(value: bytes, hdrs: list) -> None:
        producer.produce(topic, key=b"k", value=value, partition=0, headers=hdrs)

    send(b"ok", [(headers.COMMIT_TS, ts)])
    send(b"", [(headers.TYPE, RESOLVED), (headers.COMMIT_TS, ts)])  # a watermark at ts
    send(b"late", [(headers.COMMIT_TS, ts)])  # at the watermark: late
    send(b"bad-ts", [(headers.COMMIT_TS, b"soon")])
    send(b"bad-txn", [(headers.COMMIT_TS, str(int(ts) + 1).encode()), (headers.TXN, b"a:b/1/2")])
    big = b"x" * (6 << 20)
    send(big, [(headers.COMMIT_TS, str(int(ts) + 2).encode())])
    producer.flush(30)
    feed = services.start_feed(
        "ordered-dlq",
        clusters,
        [topic],
        mode="ordered",
        sink_uri=f"kafka://{clusters.b.alias}/{unique('out')}",
        sinks=0,
        config={"staging.partitions": 1},
    )
    staged = _staging(clusters, feed, 2)
    data = [r for r in flatten(staged) if not _is_mark(r)]
    assert [len(r.value) for r in data] == [2, len(big)]
    marks = [r for r in flatten(staged) if _is_mark(r)]
    assert marks and _ts(marks[-1]) == int(ts)  # the watermark, however late the clock
    deadline = time.monotonic() + 60
    while True:
        letters = [
            r
            for r in flatten(read_many(clusters.b.config, [topics.DLQ]))
            if r.header(dlq.FEED) == feed.name.encode()
        ]
        if len(letters) >= 3 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert [(r.value, r.header(dlq.ERROR_CLASS)) for r in letters] == [
        (b"late", b"LateChange"),
        (b"bad-ts", b"BadChangeHeaders"),
        (b"bad-txn", b"BadChangeHeaders"),
    ]
    assert feed.pullers[0].alive
