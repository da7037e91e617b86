"""Limits of the ordered-feed sinks: a 1,000,000-event source transaction with bounded
memory (peak RSS of the sink process), and the PostgreSQL sink's apply rate on a bank
backlog beside the database's own ceiling (the same rows by plain batched upserts).

Figures are printed (``-s``); the assertions are the guarantees, with generous bounds.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg
import pytest
from confluent_kafka import TopicPartition

from crossfeed.kafka import clients
from crossfeed.wire import codec, topics
from tests.integration.test_postgres_sink import BASE_TS, Bank, _schema
from tests.integration.test_postgres_sink import _start as start_pg
from tests.support.sorted_stream import (
    Change,
    FastChangeEvents,
    SortedWriter,
    Txn,
)

pytestmark = [pytest.mark.integration, pytest.mark.e2e, pytest.mark.slow]

BIG = 1_000_000
RSS_LIMIT_MB = 400


def _peak_rss_mb(pid: int | None) -> float:
    assert pid is not None
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _cpu_s(pid: int | None) -> float:
    """user + system CPU seconds of a process so far."""
    assert pid is not None
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _write_big(writer: SortedWriter, txn_id: str, ts: int, make) -> None:
    """A transaction of BIG changes, streamed to the sorted topic (never held whole), in
    the inline form the sorter writes."""
    for seq in range(1, BIG + 1):
        key, value = make(seq)
        writer._send(
            key,
            value,
            [
                ("crossfeed-commit-ts", str(ts).encode()),
                ("crossfeed-txn", f"{txn_id}/{seq}/{BIG}".encode()),
                ("crossfeed-order", f"{seq}/{BIG}/{ts}/{txn_id}".encode()),
            ],
            ts // 1000,
        )


def test_million_event_transaction_into_kafka_bounded_memory(clusters, services, unique):
    target = unique("big")
    feed = services.start_feed(
        "obig",
        clusters,
        ["unused"],
        mode="ordered",
        pullers=0,
        sink_uri=f"kafka://{clusters.b.alias}/{target}",
    )
    sink = feed.sinks[0]
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
    small = Txn("small", BASE_TS, (Change(b"k", b"v"),))
    writer.txn(small)
    value = b"x" * 200
    started = time.monotonic()
    _write_big(writer, "big", BASE_TS + 10, lambda seq: (str(seq).encode(), value))
    writer.resolved(BASE_TS + 20)
    writer.flush()
    written = time.monotonic()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == BASE_TS + 20, 600, "past the big one")
    applied = time.monotonic()
    consumer = clients.consumer(clusters.b.config, **{"group.id": unique("g")})
    low, high = consumer.get_watermark_offsets(TopicPartition(target, 0), timeout=10)
    consumer.close()
    rss = _peak_rss_mb(sink.pid)
    print(
        f"\nkafka sink: 1,000,000-event transaction written to .sorted in "
        f"{written - started:.1f}s, applied {applied - started:.1f}s after the start; "
        f"sink peak RSS {rss:.0f} MiB"
    )
    # 1 + 1,000,000 records and the commit markers of one or two Kafka transactions
    assert high - low in (1 + BIG + 1, 1 + BIG + 2)
    assert rss < RSS_LIMIT_MB


def test_million_row_transaction_into_postgres_bounded_memory(clusters, services, postgres):
    feed = start_pg(services, clusters, postgres, "pgbig")
    sink = feed.sinks[0]
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name))
    fast = FastChangeEvents()
    cols = [
        {"name": "id", "type": "long", "primary_key": True, "nullable": False},
        {"name": "v", "type": "string", "primary_key": False, "nullable": True},
    ]

    def event(seq: int) -> tuple[None, bytes]:
        value = {
            "table": "big",
            "op": "insert",
            "schema_version": 1,
            "columns": cols,
            "key": {"id": seq},
            "before": None,
            "after": {"id": seq, "v": "x" * 50},
            "ddl": None,
        }
        return None, fast.encode(value)

    assert codec.decode("ChangeEvent", event(1)[1])["after"] == {"id": 1, "v": "x" * 50}
    started = time.monotonic()
    _write_big(writer, "big", BASE_TS + 10, event)
    writer.resolved(BASE_TS + 20)
    writer.flush()
    written = time.monotonic()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == BASE_TS + 20, 600, "past the big one")
    applied = time.monotonic()
    assert postgres.execute("SELECT count(*) FROM big").fetchone() == (BIG,)
    rss = _peak_rss_mb(sink.pid)
    print(
        f"\npostgresql sink: 1,000,000-row transaction written to .sorted in "
        f"{written - started:.1f}s, applied {applied - started:.1f}s after the start; "
        f"sink peak RSS {rss:.0f} MiB"
    )
    assert rss < RSS_LIMIT_MB


def _ceiling(uri: str, schema: str, rows: list[tuple[int, int, str, int]]) -> float:
    """Rows/s of the same upserts with no crossfeed in between: batched executemany of
    1,000 rows per transaction (the sink's statement, last writer wins included)."""
    from crossfeed.services.sink.postgres.mapping import upsert

    sql = upsert(schema, "ceiling", ["id", "balance", "owner"], ["id"])
    with psycopg.connect(uri) as conn:
        conn.execute(
            f'CREATE TABLE "{schema}".ceiling (id bigint PRIMARY KEY, balance bigint, owner text, '
            "_crossfeed_commit_ts bigint NOT NULL DEFAULT 0)"
        )
        conn.commit()
        started = time.monotonic()
        for i in range(0, len(rows), 1000):
            with conn.cursor() as cur:
                cur.executemany(sql, rows[i : i + 1000])
            conn.commit()
        return len(rows) / (time.monotonic() - started)


@pytest.mark.parametrize("form", ["inline", "framed"])
def test_postgres_apply_rate_beside_the_database_ceiling(clusters, services, postgres, form):
    """A backlog of bank transfers (2 row changes each) applied from a cold start, written
    in either form of docs/ordered-feeds.md §3 (the sink's CPU of each, side by side)."""
    transfers = 100_000
    bank = Bank(10_000, seed=9)
    txns: list[Any] = [bank.opening()] + [bank.transfer() for _ in range(transfers)]
    rows = sum(len(t.changes) for t in txns)
    feed = start_pg(services, clusters, postgres, f"pgrate-{form}", wait=False, settings={})
    feed.sinks[0].kill()  # the backlog first, then a cold start
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name), form)
    for t in txns:
        writer.txn(t)
    final_r = BASE_TS + (bank.n + 1) * 100
    writer.resolved(final_r)
    writer.flush()
    sink = feed.sinks[0]
    sink.start()
    sink.wait_ready()  # the process is up (imports, /status); it connects after this
    started = time.monotonic()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == final_r, 600, "caught up")
    took = time.monotonic() - started
    cpu_s = _cpu_s(sink.pid)
    assert dict(postgres.execute("SELECT id, balance FROM accounts").fetchall()) == bank.balances
    # the ceiling: every row change as its own upsert (no merging), batched
    ceiling_rows = [
        (i, bal, "o", n) for n, (i, bal) in enumerate((i % 10_000, i) for i in range(rows))
    ]
    ceiling = _ceiling(clusters.postgres_uri, _schema(postgres), ceiling_rows)
    print(
        f"\npostgresql sink, {form}: {len(txns):,} transactions, {rows:,} row changes applied in "
        f"{took:.1f}s from a cold start: {rows / took:,.0f} rows/s, {len(txns) / took:,.0f} "
        f"transactions/s ({ceiling and rows / took / ceiling:.0%} of the ceiling), sink CPU "
        f"{cpu_s:.1f}s in all; the database's own ceiling (batched upserts, 1,000 a "
        f"transaction): {ceiling:,.0f} rows/s"
    )


@pytest.mark.parametrize("form", ["inline", "framed"])
def test_kafka_apply_rate(clusters, services, unique, form):
    """A backlog of 100,000 two-record transactions (200 B values) applied from a cold
    start into a Kafka topic, written in either form of docs/ordered-feeds.md §3."""
    target = unique("rate")
    feed = services.start_feed(
        f"orate-{form}",
        clusters,
        ["unused"],
        mode="ordered",
        pullers=0,
        sink_uri=f"kafka://{clusters.b.alias}/{target}",
        wait=False,
    )
    sink = feed.sinks[0]
    sink.kill()  # the backlog first, then a cold start
    writer = SortedWriter(clusters.b.config, topics.sorted_(feed.name), form)
    value = b"v" * 200
    n = 100_000
    for i in range(n):
        changes = (Change(f"a{i}".encode(), value), Change(f"b{i}".encode(), value))
        writer.txn(Txn(f"t{i:08d}", BASE_TS + i, changes))
    writer.resolved(BASE_TS + n)
    writer.flush()
    sink.start()
    sink.wait_ready()
    started = time.monotonic()
    sink.wait_status(lambda s: s["checkpoint_ts_us"] == BASE_TS + n, 600, "caught up")
    took = time.monotonic() - started
    print(
        f"\nkafka sink, {form}: {n:,} transactions, {2 * n:,} records applied in {took:.1f}s "
        f"from a cold start: {2 * n / took:,.0f} records/s, {n / took:,.0f} transactions/s; "
        f"sink CPU {_cpu_s(sink.pid):.1f}s in all"
    )
