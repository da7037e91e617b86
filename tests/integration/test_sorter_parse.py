"""The sorter's Spark SQL row rules (services/sorter/spark_release.parse_rows) give the
answers of their Python reference (services/sorter/rules.py), on crafted headers; the
driver path parses the same rows to the same columns (driver_release.parse), and a
pending segment written by either path is read the same by the other. A local Spark, no brokers."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from crossfeed.services.sorter import rules
from crossfeed.wire import headers

pytestmark = [pytest.mark.spark]

H = headers
CASES: list[tuple[str, list[tuple[str, bytes]], bytes | None]] = [
    ("data", [(H.COMMIT_TS, b"17"), (H.TXN, b"tx/2/3"), (H.SRC, b"C1/orders/4/99")], b"k"),
    ("no txn", [(H.COMMIT_TS, b"18"), (H.SRC, b"C1/orders/4/100")], b"k"),
    ("empty cluster id", [(H.COMMIT_TS, b"18"), (H.SRC, b"/orders/4/100")], None),
    ("mark", [(H.TYPE, b"resolved"), (H.COMMIT_TS, b"20")], b"orders/4"),
    ("mark bad key", [(H.TYPE, b"resolved"), (H.COMMIT_TS, b"20")], b"orders"),
    ("mark no ts", [(H.TYPE, b"resolved")], b"orders/4"),
    ("bad ts", [(H.COMMIT_TS, b"x1"), (H.TXN, b"tx/1/1")], b"k"),
    ("no ts", [(H.TXN, b"tx/1/1")], b"k"),
    ("seq > count", [(H.COMMIT_TS, b"5"), (H.TXN, b"tx/4/3")], b"k"),
    ("seq 0", [(H.COMMIT_TS, b"5"), (H.TXN, b"tx/0/3")], b"k"),
    ("colon in id", [(H.COMMIT_TS, b"5"), (H.TXN, b"a:b/1/1")], b"k"),
    ("no txn no src", [(H.COMMIT_TS, b"5")], b"k"),
    ("unknown type", [(H.TYPE, b"begin"), (H.COMMIT_TS, b"5")], b"k"),
    ("two ts headers", [(H.COMMIT_TS, b"6"), (H.COMMIT_TS, b"7"), (H.TXN, b"t/1/1")], b"k"),
    ("mark no key", [(H.TYPE, b"resolved"), (H.COMMIT_TS, b"21")], None),
    ("txn not text", [(H.COMMIT_TS, b"5"), (H.TXN, b"\xff/1/1")], b"k"),
    ("long ts", [(H.COMMIT_TS, b"1234567890123456789"), (H.TXN, b"t/1/1")], b"k"),
    ("ts newline", [(H.COMMIT_TS, b"12\n"), (H.TXN, b"t/1/1")], b"k"),
    ("txn newline", [(H.COMMIT_TS, b"12"), (H.TXN, b"t/1/1\n")], b"k"),
    ("src newline", [(H.COMMIT_TS, b"12"), (H.SRC, b"C1/orders/4/100\n")], b"k"),
    ("mark key newline", [(H.TYPE, b"resolved"), (H.COMMIT_TS, b"22")], b"orders/5\n"),
]


def reference(hdrs: list[tuple[str, bytes]], key: bytes | None) -> dict[str, object]:
    first = {}
    for name, value in hdrs:
        first.setdefault(name, value.decode())
    ts = rules.parse_commit_ts(first.get(H.COMMIT_TS))
    if first.get(H.TYPE) == H.TYPE_RESOLVED:
        ok = rules.parse_mark_key(key.decode() if key else None) is not None and ts is not None
        return {"kind": "mark" if ok else "bad", "commit_ts": ts}
    if H.TYPE in first:
        return {"kind": "bad", "commit_ts": ts}
    ref = rules.parse_txn(first.get(H.TXN), rules.parse_src(first.get(H.SRC)))
    if ts is None or ref is None:
        return {"kind": "bad", "commit_ts": ts}
    return {
        "kind": "data",
        "commit_ts": ts,
        "txn_id": ref.txn_id,
        "seq": ref.seq,
        "count": ref.count,
    }


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


def _changes_frame(spark: object) -> object:
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
    when = WHEN
    rows = [
        (key, label.encode(), "_crossfeed.f.changes", 2, i, when, 0, hdrs)
        for i, (label, hdrs, key) in enumerate(CASES)
    ]
    return spark.createDataFrame(rows, schema)  # type: ignore[attr-defined]


WHEN = dt.datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=dt.UTC)


def test_parse_matches_the_python_rules(spark: object) -> None:
    from crossfeed.services.sorter.spark_release import parse_rows as parse

    when = WHEN
    out = {r["value"].decode(): r.asDict() for r in parse(_changes_frame(spark)).collect()}  # type: ignore[arg-type]
    for label, hdrs, key in CASES:
        if label == "txn not text":
            continue  # the reference takes text (the driver test below covers it)
        got, want = out[label], reference(hdrs, key)
        assert got["kind"] == want["kind"], (label, got)
        assert got["commit_ts"] == want["commit_ts"], (label, got)
        assert (got["error"] is not None) == (want["kind"] == "bad"), (label, got)
        if want["kind"] == "data":
            assert (got["txn_id"], got["seq"], got["count"]) == (
                want["txn_id"],
                want["seq"],
                want["count"],
            ), label
        assert got["timestamp_ms"] == int(when.timestamp() * 1000)
    assert out["mark"]["part"] == "orders/4"
    assert (out["data"]["src_cluster"], out["data"]["src_topic"]) == ("C1", "orders")
    assert (out["data"]["src_partition"], out["data"]["src_offset"]) == (4, 99)
    assert out["no txn"]["txn_id"] == "C1:orders:4:100"
    # without crossfeed-src, dead letters name the staging record
    assert out["no ts"]["src_topic"] == "_crossfeed.f.changes"
    assert out["no ts"]["src_offset"] == 7


def test_the_driver_parses_every_row_as_spark_does(spark: object) -> None:
    from crossfeed.services.sorter import driver_release
    from crossfeed.services.sorter.driver_release import RAW_COLUMNS
    from crossfeed.services.sorter.spark_release import parse_rows as parse

    frame = _changes_frame(spark)
    by_spark = [r.asDict(recursive=True) for r in parse(frame).orderBy("value").collect()]  # type: ignore[arg-type]
    table = driver_release.parse(frame.select(*RAW_COLUMNS).toArrow())  # type: ignore[attr-defined]
    assert table.schema == driver_release.SCHEMA
    rows = driver_release.rows_of(table)
    by_driver = sorted(rows, key=lambda r: r.value or b"")
    assert len(by_driver) == len(by_spark) == len(CASES)
    for got, want in zip(by_driver, by_spark, strict=True):
        label = (got.value or b"").decode()  # both read the bytes as U+FFFD
        want["headers"] = [(h["key"], h["value"]) for h in want["headers"] or []]
        assert dataclasses.asdict(got) == want, label


def test_a_segment_of_either_path_reads_the_same_in_the_other(spark: object, tmp_path) -> None:
    from crossfeed.services.sorter import segments
    from crossfeed.services.sorter.rules import Segment, Window
    from crossfeed.services.sorter.segments import Store
    from crossfeed.services.sorter.spark_release import parse_rows as parse

    store = Store(tmp_path)
    store.pending_dir.mkdir(parents=True)
    parsed = parse(_changes_frame(spark))  # type: ignore[arg-type]
    parsed.write.parquet(store.segment_path("by-spark"))
    data = segments.read(store, [Segment("by-spark", 99, 1)], Window(-1, 2**62))
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
