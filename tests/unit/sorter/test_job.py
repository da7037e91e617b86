"""The sorter job's sequence (services/sorter/job.py), with no Spark and no Kafka: the
batch's rows handed over as Arrow, a producer and a Spark engine that record what they are
asked. Each batch is read, decided (the engine chosen once, with its reason), released,
then the resolved mark — after every record it covers is flushed — then pruning, then the
state saved; the engines' own output is held by test_driver_rows.py and
tests/integration/test_sorter*.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from crossfeed.feeds import FeedSpec
from crossfeed.services.sorter import driver_rows
from crossfeed.services.sorter import job as job_module
from crossfeed.services.sorter.report import BatchReport, PartitionsSource, Released
from crossfeed.services.sorter.rules import DriverState, Segment, Window
from crossfeed.services.sorter.segments import Store
from crossfeed.wire import headers as H
from tests.support.sorter_rows import raw_table

pytestmark = pytest.mark.unit

SORTED = "_crossfeed.f.sorted"
PARTS = ("src/0", "src/1")


class Log(list[tuple[Any, ...]]):
    def kinds(self) -> list[str]:
        """What happened, in order: a `.sorted` row by its value or type, 'dlq', 'flush',
        or a Spark call by name."""
        out = []
        for entry in self:
            if entry[0] != "rec":
                out.append(entry[0])
            elif entry[1] != SORTED:
                out.append("dlq")
            else:
                hdrs = dict(entry[3])
                out.append(
                    f"mark {int(hdrs[H.COMMIT_TS])}"
                    if hdrs.get(H.TYPE) == b"resolved"
                    else (hdrs.get(H.TYPE) or entry[2]).decode()
                )
        return out


class FakeProducer:
    def __init__(self, log: Log) -> None:
        self.log = log

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                on_delivery: Any = None, _cb: Any = None, _ts: int = 0,
                headers: Any = None) -> None:  # fmt: skip
        self.log.append(("rec", topic, value, list(headers or [])))

    def flush(self, _timeout: float = 0) -> int:
        self.log.append(("flush",))
        return 0


class FakeSpark:
    """Spark's engine as the job sees it: what it is asked, and a made-up answer."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def createDataFrame(self, table: pa.Table) -> Any:
        return table

    def stage(self, df: Any, batch_id: int, prev_resolved_ts: int) -> Any:
        from crossfeed.services.sorter.spark_release import Staged

        self.log.append(("stage", batch_id, prev_resolved_ts))
        parsed = driver_rows.parse_batch(df.table if isinstance(df, Rows) else df)
        return Staged(f"seg-{batch_id:012d}", parsed.rows, parsed.mark_rows, parsed.marks, None, 0)

    def release(self, batch_id: int, window: Window, pending: list[Segment], batch: Any) -> Any:
        self.log.append(("spark release", window, [s.name for s in pending], batch))
        return Released(events=7, txns=2, segments=list(pending))

    def compact(self, segments: list[Segment], batch_id: int, resolved_ts: int) -> Segment:
        self.log.append(("compact", [s.name for s in segments], resolved_ts))
        return Segment(f"merged-{batch_id:012d}", max(s.max_ts for s in segments), 2)


class Rows:
    """A micro-batch as Spark's Kafka source gives it (toArrow), or one the driver must
    not read (``readable=False``)."""

    def __init__(self, rows: list[Any], readable: bool = True) -> None:
        self.table, self.readable = raw_table(rows), readable
        self.num_rows = self.table.num_rows

    def select(self, *_columns: str) -> Rows:
        return self

    def toArrow(self) -> pa.Table:
        assert self.readable, "read into the driver"
        return self.table


def change(ts: int, txn: str, seq: int, count: int) -> Any:
    hdrs = [(H.COMMIT_TS, str(ts).encode()), (H.TXN, f"{txn}/{seq}/{count}".encode())]
    hdrs.append((H.PROV, f"C/src/0/{ts}{seq}".encode()))
    return (b"k", f"{txn}{seq}".encode(), hdrs, "_crossfeed.f.changes", 0, 0, 1000)


def marks(ts: int) -> list[Any]:
    hdrs = [(H.TYPE, b"resolved"), (H.COMMIT_TS, str(ts).encode())]
    return [(p.encode(), b"m", hdrs, "_crossfeed.f.changes", 1, 0, 1000) for p in PARTS]


class Run:
    def __init__(self, tmp: Path, monkeypatch: pytest.MonkeyPatch, **options: int) -> None:
        self.log = Log()
        self.reports: list[BatchReport] = []
        monkeypatch.setattr(
            job_module.clients, "producer", lambda *_a, **_k: FakeProducer(self.log)
        )
        partitions = PartitionsSource()
        partitions.set(frozenset(PARTS))
        feed = FeedSpec.model_validate({"name": "f", "source": "a", "sink-uri": "kafka://b/t",
                                        "topics": ["src"], "mode": "ordered"})  # fmt: skip
        self.store = Store(tmp).open()
        spark = FakeSpark(self.log)
        self.job = job_module.SorterJob(
            spark,  # type: ignore[arg-type]
            feed,
            self.store,
            {},
            {},
            partitions,
            source_cluster_id="C",
            max_offsets_per_trigger=1000,
            trigger_interval_ms=100,
            max_segments=options.get("max_segments", 10),
            driver_release_rows=options.get("driver_release_rows", 100),
            on_batch=lambda report, _state: self.reports.append(report),
        )
        self.job.spark_release = spark  # type: ignore[assignment]

    def batch(self, batch_id: int, rows: Rows) -> tuple[list[str], BatchReport, DriverState]:
        start = len(self.log)
        self.job.process_batch(rows, batch_id)  # type: ignore[arg-type]
        return Log(self.log[start:]).kinds(), self.reports[-1], self.store.latest()


def test_a_driver_batch_releases_flushes_then_marks_then_prunes(tmp_path, monkeypatch):
    run = Run(tmp_path, monkeypatch)
    rows = [change(20, "b", 1, 1), change(10, "a", 2, 2), change(10, "a", 1, 2), *marks(15)]
    done, report, state = run.batch(0, Rows(rows))
    assert done == ["a1", "a2", "flush", "mark 15", "flush"]
    assert (report.engine, report.reason) == ("driver", "fits")
    assert (report.released_events, report.released_txns, report.resolved_ts) == (2, 1, 15)
    # what stays pending (b, above R) is the batch's segment
    assert state.segments == [Segment("seg-000000000000", 20, 1)] and state.garbage == []
    assert (run.store.pending_dir / "seg-000000000000").is_dir()

    done, report, state = run.batch(1, Rows(marks(30)))
    assert done == ["b1", "flush", "mark 30", "flush"]
    # the segment is released: dropped from the state now, deleted when the next batch starts
    assert state.segments == [] and state.garbage == ["seg-000000000000"]
    assert (run.store.pending_dir / "seg-000000000000").is_dir()
    done, report, _ = run.batch(2, Rows([]))
    assert done == [] and report.resolved_ts == 30
    assert not (run.store.pending_dir / "seg-000000000000").exists()


def test_a_commit_ts_too_big_for_the_driver_is_sorted_by_spark_chosen_before_the_release(
    tmp_path, monkeypatch
):
    run = Run(tmp_path, monkeypatch, driver_release_rows=6)  # batches of 6 rows fit
    run.batch(0, Rows([*(change(10, "big", seq, 7) for seq in range(1, 5)), *marks(5)]))
    late = change(4, "late", 1, 1)
    big = [change(10, "big", seq, 7) for seq in range(5, 8)]
    done, report, state = run.batch(1, Rows([*big, late, *marks(12)]))
    assert (report.engine, report.reason) == ("spark", "big_commit_ts")
    # the driver writes the late row to the DLQ and keeps the batch's rows as its segment;
    # Spark releases the window from both segments; then the mark
    ((window, pending, batch),) = [e[1:] for e in run.log if e[0] == "spark release"]
    assert done == ["dlq", "flush", "spark release", "mark 12", "flush"]
    assert window == Window(5, 12) and batch is None
    assert pending == ["seg-000000000000", "seg-000000000001"]
    assert (report.released_events, report.released_txns, report.dead_letters) == (7, 2, 1)
    assert state.resolved_ts == 12 and state.segments == []
    assert state.garbage == ["seg-000000000000", "seg-000000000001"]


def test_a_big_batch_goes_to_spark_and_the_next_one_without_a_read(tmp_path, monkeypatch):
    run = Run(tmp_path, monkeypatch, driver_release_rows=2)
    rows = [change(10, "a", 1, 1), *marks(15)]
    done, report, _ = run.batch(0, Rows(rows))
    assert (report.engine, report.reason) == ("spark", "big_batch")
    assert done == ["stage", "spark release", "mark 15", "flush"]
    done, report, _ = run.batch(1, Rows(marks(20), readable=False))
    assert (report.engine, report.reason) == ("spark", "after_big_batch")
    done, report, _ = run.batch(2, Rows(marks(25)))  # the one before was small
    assert (report.engine, report.reason) == ("driver", "fits")


def test_with_the_driver_off_every_batch_goes_to_spark(tmp_path, monkeypatch):
    run = Run(tmp_path, monkeypatch, driver_release_rows=0)
    done, report, _ = run.batch(0, Rows(marks(15), readable=False))
    assert (report.engine, report.reason) == ("spark", "driver_off")
    assert done == ["stage", "spark release", "mark 15", "flush"]


def test_compaction_comes_after_the_mark(tmp_path, monkeypatch):
    run = Run(tmp_path, monkeypatch, max_segments=1)
    run.batch(0, Rows([change(10, "a", 1, 1), change(30, "c", 1, 1), *marks(5)]))
    done, report, state = run.batch(1, Rows([change(40, "d", 1, 1), *marks(20)]))
    assert done == ["a1", "flush", "mark 20", "flush", "compact"]
    assert report.compacted
    assert state.segments == [Segment("merged-000000000001", 40, 2)]
    assert state.garbage == ["seg-000000000000", "seg-000000000001"]
