"""The sorter's Spark SQL row rules (services/sorter/spark_release.parse_rows) give the
answers the table of tests/support/sorter_rows.py writes out (the driver's pyarrow parse is
held to the same table in tests/unit/sorter/test_driver_rows.py); on any rows the two
engines give the same columns; both decide alike which transactions are complete; and a
pending segment written by either path is read the same by the other. A local Spark, no
brokers."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossfeed import dlq
from crossfeed.wire import headers as H
from tests.support import sorter_rows

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def spark() -> Iterator[object]:
    from crossfeed.services.sorter.job import build_session

    session = build_session(
        {
            "spark.master": "local[1]",
            "spark.ui.enabled": "false",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": "1",
            "spark.ui.showConsoleProgress": "false",
        },
        local=True,
    )
    yield session
    session.stop()  # type: ignore[attr-defined]


def _changes_frame(spark: object, rows: list[sorter_rows.Raw] | None = None) -> object:
    """Rows as Spark's Kafka source gives them (by default the table of sorter_rows)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [StructField("key", StringType()), StructField("value", BinaryType())]
                    )
                ),
            ),
        ]
    )
    if rows is None:
        rows = [sorter_rows.staged(i, case) for i, case in enumerate(sorter_rows.CASES)]
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
    frame = [
        (key, value, topic, partition, offset, epoch + dt.timedelta(milliseconds=ms), 0, hdrs)
        for key, value, hdrs, topic, partition, offset, ms in rows
    ]
    return spark.createDataFrame(frame, schema)  # type: ignore[attr-defined]


def _by_spark(spark: object, rows: list[sorter_rows.Raw] | None = None) -> list[dict[str, Any]]:
    """Spark's parse of ``rows``, in their order, as dicts of segments.SCHEMA's columns."""
    from pyspark.sql import functions as F

    from crossfeed.services.sorter.spark_release import parse_rows

    parsed = parse_rows(_changes_frame(spark, rows)).withColumn(  # type: ignore[arg-type]
        "_at", F.monotonically_increasing_id()
    )
    out = []
    for row in parsed.orderBy("_at").drop("_at").collect():
        got = row.asDict(recursive=True)
        got["headers"] = [(h["key"], h["value"]) for h in got["headers"] or []]
        out.append(got)
    return out


def _by_driver(rows: list[sorter_rows.Raw]) -> list[dict[str, Any]]:
    from crossfeed.services.sorter import driver_rows

    table = driver_rows.parse(sorter_rows.raw_table(rows))
    assert table.schema == driver_rows.SCHEMA
    return [dataclasses.asdict(r) for r in driver_rows.rows_of(table)]


def test_spark_parses_each_row_of_the_table_as_it_says(spark: object) -> None:
    got = _by_spark(spark)
    for offset, (case, row) in enumerate(zip(sorter_rows.CASES, got, strict=True)):
        assert row == sorter_rows.expected(offset, case), case.label


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(sorter_rows.RAW_ROWS, min_size=1, max_size=25))
def test_both_engines_read_any_rows_alike(spark: object, raws: list[sorter_rows.Raw]) -> None:
    """Spark's parse and the driver's give the same columns for the same rows, whatever
    their bytes (Spark reads bytes that are not UTF-8 as U+FFFD, as the driver does)."""
    assert _by_spark(spark, raws) == _by_driver(raws)


# -- which transactions are complete (rule D) ---------------------------------------------

SORTED = "_crossfeed.f.sorted"
# seq values of a transaction of 8: n == count, min 1, max 8, and the sum and the sum of
# squares of 1..8 (36 and 204), but 1, 5 and 6 twice and 2, 3, 7 missing
NOT_A_PERMUTATION = (1, 1, 4, 5, 5, 6, 6, 8)


def _changes(txns: list[tuple[int, str, list[int], int]]) -> list[sorter_rows.Raw]:
    """Data rows of transactions (commit_ts, txn id, its seqs, count), in that order."""
    rows: list[sorter_rows.Raw] = []
    for ts, txn, seqs, count in txns:
        for seq in seqs:
            hdrs = [(H.COMMIT_TS, str(ts).encode()), (H.TXN, f"{txn}/{seq}/{count}".encode())]
            hdrs.append((H.PROV, f"C/orders/0/{len(rows)}".encode()))
            rows.append((b"k", f"{txn}-{seq}".encode(), hdrs, "t", 0, len(rows), 1000))
    return rows


def _released(spark: object, rows: list[sorter_rows.Raw], window: Any) -> dict[str, list[Any]]:
    """Both engines' release of ``rows`` in ``window``: the `.sorted` records in order and
    the dead letters in any order, per engine."""
    from pyspark.sql import functions as F

    from crossfeed.feeds import FeedSpec
    from crossfeed.services.sorter import driver_rows
    from crossfeed.services.sorter.spark_release import SparkRelease

    table = driver_rows.parse(sorter_rows.raw_table(rows))
    feed = FeedSpec.model_validate({"name": "f", "source": "a", "sink-uri": "kafka://b/t",
                                    "topics": ["orders"], "mode": "ordered"})  # fmt: skip
    engine = SparkRelease(spark, feed, None, {}, SORTED)  # type: ignore[arg-type]
    frame = spark.createDataFrame(table)  # type: ignore[attr-defined]
    ts = F.col("commit_ts")
    inside = frame.filter(
        (F.col("kind") == "data")
        & (ts > F.lit(window.prev_resolved_ts))
        & (ts <= F.lit(window.resolved_ts))
    )
    ordered = inside.repartition(1).sortWithinPartitions("commit_ts", "txn_id", "seq")
    by_spark = [
        (r["topic"], r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"]])
        for r in engine._transactions(engine._completeness(ordered), window).collect()
    ]
    by_driver = driver_rows.window_records(table, window, "f").records

    def split(records: list[Any]) -> tuple[list[Any], list[Any]]:
        return [r for r in records if r[0] == SORTED], sorted(r for r in records if r[0] != SORTED)

    (spark_sorted, spark_dlq), (driver_sorted, driver_dlq) = split(by_spark), split(by_driver)
    return {"spark": [spark_sorted, spark_dlq], "driver": [driver_sorted, driver_dlq]}


def test_seqs_with_the_sums_of_a_whole_transaction_are_not_one(spark: object) -> None:
    from crossfeed.services.sorter.rules import Window

    assert sum(NOT_A_PERMUTATION) == sum(range(1, 9))
    assert sum(s * s for s in NOT_A_PERMUTATION) == sum(s * s for s in range(1, 9))
    rows = _changes([(5, "dup", list(NOT_A_PERMUTATION), 8), (6, "ok", [2, 1], 2)])
    for engine, (released, letters) in _released(spark, rows, Window(0, 10)).items():
        assert [r[2] for r in released] == [b"ok-1", b"ok-2"], engine
        assert [dict(r[3])[H.ORDER] for r in released] == [b"1/2/6/ok", b"2/2/6/ok"], engine
        assert len(letters) == 8, engine
        assert {dict(r[3])[dlq.ERROR_CLASS] for r in letters} == {b"IncompleteTransaction"}


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(st.integers(1, 30), st.sampled_from("abcdef"), st.integers(1, 9)),
        min_size=1,
        max_size=80,
    ),
    st.integers(0, 31),
    st.randoms(use_true_random=False),
)
def test_both_engines_release_the_same_transactions(spark: object, txns, high, rnd) -> None:
    """Transactions that may miss a change, have one twice or with another count, in any
    arrival order: both engines release the same records in the same order and dead-letter
    the same rows; a transaction comes out iff its seqs are 1..count once each."""
    from crossfeed.services.sorter.rules import Window

    made, whole = [], set()
    for (ts, txn), count in {(ts, txn): count for ts, txn, count in txns}.items():
        seqs = list(range(1, count + 1))
        damage = rnd.random()
        if damage < 0.2:
            seqs.pop(rnd.randrange(count))
        elif damage < 0.4:
            seqs[rnd.randrange(count)] = rnd.choice(seqs)  # one twice, one missing
        elif damage < 0.5:
            seqs.append(rnd.choice(seqs))
        counts = [count] * len(seqs)
        if 0.5 <= damage < 0.6 and count > 1:
            counts[0] = count + 1
        rnd.shuffle(seqs)
        if sorted(seqs) == list(range(1, count + 1)) and len(set(counts)) == 1:
            whole.add((ts, txn))
        for seq, n in zip(seqs, counts, strict=True):
            made.append((ts, txn, [seq], n))
    rnd.shuffle(made)
    window = Window(0, high)
    got = _released(spark, _changes(made), window)
    assert got["spark"] == got["driver"]
    places = [dict(r[3])[H.ORDER].decode().split("/", 3) for r in got["spark"][0]]
    released = [(int(ts), txn) for seq, _count, ts, txn in places if seq == "1"]
    assert released == sorted(t for t in whole if window.releases(t[0]))


def test_a_segment_of_either_path_reads_the_same_in_the_other(spark: object, tmp_path) -> None:
    from crossfeed.services.sorter import segments
    from crossfeed.services.sorter.rules import Segment, Window
    from crossfeed.services.sorter.segments import Store
    from crossfeed.services.sorter.spark_release import parse_rows as parse

    store = Store(tmp_path)
    store.pending_dir.mkdir(parents=True)
    parsed = parse(_changes_frame(spark))  # type: ignore[arg-type]
    parsed.write.parquet(store.segment_path("by-spark"))
    data = segments.read(store, [Segment("by-spark", 99, 1)], Window(-1, 2**63 - 1))
    want = sorted(r["value"] for r in parsed.filter("kind = 'data'").collect())
    assert sorted(data.column("value").to_pylist()) == want and want
    # a window: only the rows it releases, and their count from two columns
    window = Window(6, 17)
    inside = segments.read(store, [Segment("by-spark", 99, 1)], window)
    got = sorted(inside.column("commit_ts").to_pylist())
    assert got == sorted(
        r["commit_ts"] for r in parsed.filter("kind = 'data'").collect() if 6 < r["commit_ts"] <= 17
    )
    assert got and len(got) < len(want)
    counts = segments.file_ts_counts(store, Segment("by-spark", 99, 1), window)
    assert sorted(counts.elements()) == got
    written = segments.write(store, "by-driver", data)
    assert written.rows == data.num_rows
    assert written.max_ts == max(data.column("commit_ts").to_pylist())
    back = spark.read.parquet(store.segment_path("by-driver"))  # type: ignore[attr-defined]
    types = [(f.name, f.dataType.simpleString()) for f in back.schema.fields]
    assert types == [(f.name, f.dataType.simpleString()) for f in parsed.schema.fields]

    def by_value(rows: list[Any]) -> list[dict[str, Any]]:
        return sorted((r.asDict(recursive=True) for r in rows), key=lambda r: r["value"])

    assert by_value(back.collect()) == by_value(parsed.filter("kind = 'data'").collect())
