"""Writing ``_crossfeed.<feed>.changes`` directly (docs/ordered-feeds.md §2), and reading
and checking ``_crossfeed.<feed>.sorted`` (§3), for sorter tests without a puller.

:class:`ChangesWriter` stamps data records like the puller does (``crossfeed-src``,
``crossfeed-commit-ts``, ``crossfeed-txn``, provenance) into the staging partition its
source partition maps to, and writes resolved marks keyed ``<topic>/<partition>``.
:func:`transactions_workload` builds a skewed workload; :func:`check_sorted` verifies a
sorted stream and returns its transactions (replays dropped as a sink drops them).
"""

from __future__ import annotations

import random
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from crossfeed.wire import codec, headers


@dataclass
class Change:
    topic: str
    partition: int
    commit_ts: int
    txn_id: str
    seq: int
    count: int
    key: bytes
    value: bytes
    timestamp_ms: int
    offset: int = -1  # source offset, given when written


class ChangesWriter:
    """Writes changes and marks as the puller would, to a changes topic."""

    def __init__(
        self,
        producer: Producer,
        changes_topic: str,
        staging_partitions: int,
        source_cluster_id: str = "SRC0cluster0id0000000w",
    ) -> None:
        self.producer = producer
        self.topic = changes_topic
        self.staging = staging_partitions
        self.cluster_id = source_cluster_id
        self.offsets: dict[tuple[str, int], int] = {}

    def staging_partition(self, topic: str, partition: int) -> int:
        return (zlib.crc32(topic.encode()) + partition) % self.staging

    def data(self, change: Change, *, with_txn_header: bool = True) -> None:
        tp = (change.topic, change.partition)
        offset = self.offsets.get(tp, 0)
        self.offsets[tp] = offset + 1
        change.offset = offset
        hdrs: list[tuple[str, bytes]] = [
            ("user-header", b"u"),
            (headers.COMMIT_TS, str(change.commit_ts).encode()),
        ]
        if with_txn_header:
            hdrs.append((headers.TXN, f"{change.txn_id}/{change.seq}/{change.count}".encode()))
        hdrs.append(
            (headers.PROV, f"{self.cluster_id}/{change.topic}/{change.partition}/{offset}".encode())
        )
        self._produce(
            self.staging_partition(*tp), change.key, change.value, hdrs, change.timestamp_ms
        )

    def mark(self, topic: str, partition: int, resolved_ts: int) -> None:
        value = codec.encode(
            "ResolvedMark",
            {
                "source_cluster": self.cluster_id,
                "topic": topic,
                "partition": partition,
                "resolved_ts_us": resolved_ts,
                "next_offset": self.offsets.get((topic, partition), 0),
            },
        )
        hdrs = [
            (headers.TYPE, headers.TYPE_RESOLVED.encode()),
            (headers.COMMIT_TS, str(resolved_ts).encode()),
        ]
        self._produce(
            self.staging_partition(topic, partition),
            f"{topic}/{partition}".encode(),
            value,
            hdrs,
            resolved_ts // 1000,
        )

    def _produce(
        self, part: int, key: bytes | None, value: bytes | None, hdrs: Any, ts_ms: int
    ) -> None:
        while True:
            try:
                self.producer.produce(
                    self.topic, key=key, value=value, headers=hdrs, partition=part, timestamp=ts_ms
                )
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(60) == 0, "changes not all delivered"


@dataclass
class Workload:
    """Transactions over several source partitions, grouped into rounds; each round ends
    with a resolved mark per partition at the round's last commit_ts."""

    partitions: list[tuple[str, int]]
    rounds: list[list[Change]] = field(default_factory=list)
    round_ts: list[int] = field(default_factory=list)

    @property
    def txns(self) -> dict[str, list[Change]]:
        out: dict[str, list[Change]] = {}
        for changes in self.rounds:
            for c in changes:
                out.setdefault(c.txn_id, []).append(c)
        return out


def transactions_workload(
    topic: str,
    partitions: int,
    txns_per_round: int,
    rounds: int,
    *,
    start_ts: int | None = None,
    seed: int = 7,
    max_changes: int = 4,
    prefix: str = "t",
) -> Workload:
    rng = random.Random(seed)
    work = Workload([(topic, p) for p in range(partitions)])
    # commit_ts near now: record timestamps (commit_ts / 1000) far in the past would fall
    # to the broker's retention before the sorter reads them
    ts = start_ts if start_ts is not None else int(time.time() * 1e6) - 3_600_000_000
    n = 0
    for _ in range(rounds):
        changes: list[Change] = []
        for _ in range(txns_per_round):
            ts += rng.randint(1, 50)
            n += 1
            count = rng.randint(1, max_changes)
            txn_id = f"{prefix}{n:07d}"
            for seq in range(1, count + 1):
                part = rng.randrange(partitions)
                changes.append(
                    Change(
                        topic,
                        part,
                        ts,
                        txn_id,
                        seq,
                        count,
                        f"k{n}-{seq}".encode(),
                        f"v{n}-{seq}".encode() * 3,
                        ts // 1000,
                    )
                )
        work.rounds.append(changes)
        work.round_ts.append(ts)
    return work


def write_round(
    writer: ChangesWriter, work: Workload, index: int, *, hold: int | None = None
) -> list[Change]:
    """Write round ``index`` with its marks; partition ``hold`` (the skewed one) gets
    neither its changes nor its mark: they are returned, to be written later (in source
    order, as a late puller would)."""
    held: list[Change] = []
    for change in work.rounds[index]:
        if change.partition == hold:
            held.append(change)
        else:
            writer.data(change)
    for topic, part in work.partitions:
        if part != hold:
            writer.mark(topic, part, work.round_ts[index])
    return held


def read_all(consumer: Consumer, topic: str, *, idle_s: float = 3.0) -> list[Any]:
    """Every record of partition 0 of ``topic`` up to its current end."""
    tp = TopicPartition(topic, 0, 0)
    _, high = consumer.get_watermark_offsets(tp, timeout=10)
    consumer.assign([tp])
    out: list[Any] = []
    while out[-1].offset() + 1 < high if out else high > 0:
        batch = consumer.consume(10_000, timeout=idle_s)
        if not batch:
            break
        out.extend(m for m in batch if m.error() is None)
    return out


def _hmap(msg: Any) -> dict[str, bytes]:
    return {k: v for k, v in (msg.headers() or [])}


@dataclass
class SortedCheck:
    txns: list[tuple[int, str, list[bytes]]]  # (commit_ts, txn id, values) in applied order
    resolved: list[int]
    replays: int
    cut_short: int


def check_sorted(messages: Sequence[Any]) -> SortedCheck:
    """Apply a sorted stream as a sink would (docs/ordered-feeds.md §4) and check it:
    within a transaction, data rows are seq 1..count in order with the transaction's
    commit_ts and txn header; a `begin` or an inline seq 1 while one is open cuts it short;
    a transaction at or below the applied position is a replay and is dropped; resolved
    marks never go backwards and every applied transaction is at or below the next mark.
    Either form of a transaction (framed by begin/commit, or inline) is read."""
    applied: list[tuple[int, str, list[bytes]]] = []
    resolved: list[int] = []
    replays = cut = 0
    open_txn: tuple[int, str, int] | None = None
    rows: list[bytes] = []
    position: tuple[int, str] | None = None

    def close(open_txn: tuple[int, str, int], rows: list[bytes]) -> None:
        nonlocal position, replays
        ts, txn_id, count = open_txn
        assert len(rows) == count, f"{txn_id}: {len(rows)} of {count} changes"
        if position is not None and (ts, txn_id) <= position:
            replays += 1
        else:
            applied.append((ts, txn_id, rows))
            position = (ts, txn_id)

    for msg in messages:
        h = _hmap(msg)
        kind = h.get(headers.TYPE, b"").decode()
        if headers.ORDER in h:  # inline: the record says where it stands
            assert kind == "", f"{headers.ORDER} on a {kind} record"
            seq, count, ts, txn_id = h[headers.ORDER].decode().split("/", 3)
            if seq == "1":
                if open_txn is not None:
                    cut += 1
                open_txn, rows = (int(ts), txn_id, int(count)), []
            assert open_txn == (int(ts), txn_id, int(count)), f"{txn_id}/{seq} out of place"
            assert int(h[headers.COMMIT_TS]) == int(ts)
            assert int(seq) == len(rows) + 1, f"{txn_id}: seq {seq} after {len(rows)}"
            if headers.TXN in h:
                assert h[headers.TXN].decode() == f"{txn_id}/{seq}/{count}"
            assert headers.TIMESTAMP in h
            rows.append(msg.value())
            if seq == count:
                close(open_txn, rows)
                open_txn = None
        elif kind == headers.TYPE_BEGIN:
            if open_txn is not None:
                cut += 1
            ts = int(h[headers.COMMIT_TS])
            txn_id, zero, count = h[headers.TXN].decode().split("/")
            assert zero == "0" and msg.key() is None and msg.value() is None
            open_txn, rows = (ts, txn_id, int(count)), []
        elif kind == headers.TYPE_COMMIT:
            assert open_txn is not None, "commit without begin"
            ts, txn_id, count = open_txn
            assert h[headers.TXN].decode() == f"{txn_id}/0/{count}"
            assert int(h[headers.COMMIT_TS]) == ts
            close(open_txn, rows)
            open_txn = None
        elif kind == headers.TYPE_RESOLVED:
            r = int(h[headers.COMMIT_TS])
            assert not resolved or r >= resolved[-1], "resolved mark went backwards"
            assert position is None or position[0] <= r, "a transaction above a resolved mark"
            mark = codec.decode("ResolvedMark", msg.value())
            assert mark["resolved_ts_us"] == r and mark["partition"] == -1
            resolved.append(r)
        else:
            assert kind == "", f"unexpected {headers.TYPE} {kind!r}"
            assert open_txn is not None, "a change outside begin/commit"
            ts, txn_id, count = open_txn
            assert int(h[headers.COMMIT_TS]) == ts
            tid, seq, cnt = (
                h[headers.TXN].decode().split("/") if headers.TXN in h else (None, "1", "1")
            )
            if tid is not None:
                assert tid == txn_id and int(cnt) == count
            assert int(seq) == len(rows) + 1, f"{txn_id}: seq {seq} after {len(rows)}"
            assert headers.TIMESTAMP in h
            rows.append(msg.value())
    keys = [(ts, t) for ts, t, _ in applied]
    assert keys == sorted(keys), "applied transactions out of (commit_ts, txn) order"
    return SortedCheck(applied, resolved, replays, cut)


def iter_chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
