"""The puller's ordered mode without brokers: what one task sends to its staging partition
for given source records (docs/ordered-feeds.md §2). Kafka's producer and messages are
faked; the real thing runs in tests/integration/test_ordered_front.py."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.client.producer import watermark_value
from crossfeed.core.partitions import TopicPartition
from crossfeed.dlq import FeedStopped
from crossfeed.feeds import FeedSpec
from crossfeed.services.puller.ordered import next_resolved, staged_size
from crossfeed.services.puller.task import PullerTask
from crossfeed.services.puller.task_state import FeedContext
from crossfeed.services.puller.txn_producer import TxnFailure
from crossfeed.wire import codec, headers
from crossfeed.wire.records import resolved_mark_headers as watermark_headers
from tests.support.recording_producer import RecordingProducer

pytestmark = pytest.mark.unit

TP = TopicPartition("bank", 0)


class _Producer(RecordingProducer):
    def __init__(self) -> None:
        super().__init__()
        self.sent = self.records
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")

    def commit_transaction(self, *args: Any) -> None:
        self.calls.append("commit")

    def abort_transaction(self, *args: Any) -> None:
        self.calls.append("abort")


class _Msg:
    def __init__(self, offset: int, hdrs: list[Any] | None, *, value: bytes = b"v", ts=5) -> None:
        self._offset, self._hdrs, self._value, self._ts = offset, hdrs, value, ts

    def offset(self) -> int:
        return self._offset

    def headers(self) -> list[Any] | None:
        return self._hdrs

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return self._value

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)

    def topic(self) -> str:
        return TP.topic

    def partition(self) -> int:
        return TP.partition


def _task(
    tolerance: str = "all", lateness_ms: int = 0, max_bytes: int = 1 << 20, debezium: bool = False
) -> PullerTask:
    feed = FeedSpec.model_validate(
        {
            "name": "f",
            "source": "dc-a",
            "sink-uri": "kafka://dc-b/out",
            "topics": ["bank"],
            "mode": "ordered",
            "config": {"errors.tolerance": tolerance, "lateness.ms": lateness_ms},
            **({"input": "debezium"} if debezium else {}),
        }
    )
    ctx = FeedContext(
        feed,
        "src",
        "dst",
        "_crossfeed.f.changes",
        1000,
        1 << 20,
        1 << 20,
        0.1,
        1.0,
        1.0,
        staging_max_bytes=max_bytes,
        schemas_topic="_crossfeed.f.schemas" if debezium else None,
    )
    task = PullerTask(ctx, 0, _Producer())  # type: ignore[arg-type]
    task.add_partition(TP, 0)
    return task


def _commit(task: PullerTask, caught_up: bool = False) -> list[dict[str, Any]]:
    producer: _Producer = task.producer  # type: ignore[assignment]
    before = len(producer.sent)
    assert task.commit({TP: task.position(TP)}, {TP} if caught_up else set()) is None
    return producer.sent[before:]


def _change(offset: int, ts: int, txn: bytes | None = None) -> _Msg:
    hdrs: list[Any] = [("app", b"x"), (headers.COMMIT_TS, str(ts).encode())]
    if txn is not None:
        hdrs.append((headers.TXN, txn))
    return _Msg(offset, hdrs)


def _mark(record: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    value = codec.decode("ResolvedMark", record["value"])
    return value["resolved_ts_us"], dict(record["headers"])


def test_a_change_without_a_timestamp_is_staged_at_the_time_of_writing() -> None:
    task = _task()
    change = _change(0, 150)
    change._ts = -1  # librdkafka's "no timestamp"
    task.add(change, task.partitions[TP])
    data = [r for r in _commit(task) if r["topic"] == "_crossfeed.f.changes"]
    assert len(data) == 2 and data[0]["timestamp"] == 0  # 0: the producer stamps it
    assert dict(data[0]["headers"])[headers.COMMIT_TS] == b"150"


def test_changes_are_staged_one_by_one_and_watermarks_drive_resolved_ts() -> None:
    task = _task()
    state = task.partitions[TP]
    task.add(_Msg(0, watermark_headers(100), value=watermark_value("bank", 0, 100)), state)
    task.add(_change(1, 150, b"t1/1/2"), state)
    task.add(_Msg(2, None, ts=7), state)  # no header: commit_ts from the timestamp
    task.add(_Msg(3, watermark_headers(160)), state)
    sent = _commit(task)
    data, marks = sent[:-1], sent[-1:]
    assert [r["value"] for r in data] == [b"v", b"v"]  # the watermarks were consumed
    first = dict(data[0]["headers"])
    assert first["app"] == b"x" and first[headers.TXN] == b"t1/1/2"
    assert first[headers.PROV] == b"src/bank/0/1"
    assert not any(name in headers.LEGACY_PROVENANCE for name, _ in data[0]["headers"])
    assert data[0]["timestamp"] == 5 and data[0]["partition"] == 0 and data[0]["key"] == b"k"
    # Without a crossfeed-commit-ts, it is added from the timestamp (7 ms)...
    assert dict(data[1]["headers"])[headers.COMMIT_TS] == b"7000"
    # (7,000 µs is above the watermark 100 read before it; the one at 160 came after.)
    assert data[1]["timestamp"] == 7
    resolved, hdrs = _mark(marks[0])
    assert resolved == 160  # the watermark, not the newest commit_ts or the clock
    assert hdrs[headers.COMMIT_TS] == b"160" and hdrs[headers.RESOLVED_FROM] == b"watermarks"
    assert marks[0]["key"] == b"bank/0"
    # Idle and caught up: a watermarked partition does not jump to the clock.
    resolved, _ = _mark(_commit(task, caught_up=True)[-1])
    assert resolved == 160


def test_a_final_watermark_hands_the_partition_back_to_the_clock() -> None:
    task = _task(lateness_ms=1)
    state = task.partitions[TP]
    task.add(_Msg(0, watermark_headers(100)), state)
    task.add(_change(1, 150), state)
    final = [*watermark_headers(200), (headers.WATERMARK, b"final")]
    task.add(_Msg(2, final), state)  # the producer closed
    resolved, hdrs = _mark(_commit(task)[-1])
    assert resolved == 200  # its last transaction is released at once
    assert headers.RESOLVED_FROM not in hdrs  # a new owner follows the clock too
    task.add(_change(3, 200), state)  # at the final watermark: late all the same
    assert _commit(task)[0]["topic"] == "_crossfeed.dlq"
    resolved, _ = _mark(_commit(task, caught_up=True)[-1])
    assert resolved > 1_000_000_000_000_000  # idle and caught up: now minus lateness
    task.add(_Msg(4, watermark_headers(0)), state)  # a new producer announces itself
    task.add(_change(5, resolved + 10_000_000), state)
    sent = _commit(task, caught_up=True)
    assert _mark(sent[-1])[0] == resolved  # its watermarks lead again: not the clock


def test_a_change_whose_provenance_is_not_utf8_is_a_dead_letter() -> None:
    task = _task()
    state = task.partitions[TP]
    task.add(_Msg(0, [(headers.COMMIT_TS, b"101"), (headers.PROV, b"\xff")]), state)
    task.add(_change(1, 102), state)
    sent = _commit(task)
    dlq = [r for r in sent if r["topic"] == "_crossfeed.dlq"]
    assert [dict(r["headers"])["crossfeed-dlq-error-class"] for r in dlq] == [b"BadProvenance"]
    staged = [r for r in sent if r["topic"] != "_crossfeed.dlq" and r["value"] == b"v"]
    assert [dict(r["headers"])[headers.COMMIT_TS] for r in staged] == [b"102"]
    assert task.position(TP) == 2


def test_late_and_malformed_changes_are_dead_letters_and_marks_never_lie() -> None:
    task = _task()
    state = task.partitions[TP]
    task.add(_Msg(0, watermark_headers(100)), state)
    task.add(_change(1, 100), state)  # at the watermark: late
    task.add(_change(2, 101, b"a:b/1/2"), state)  # a txn id with ':'
    task.add(_Msg(3, [(headers.TYPE, b"resolved"), (headers.COMMIT_TS, b"x")]), state)
    task.add(_change(4, 101), state)
    sent = _commit(task)
    dlq = [r for r in sent if r["topic"] == "_crossfeed.dlq"]
    classes = [dict(r["headers"])["crossfeed-dlq-error-class"] for r in dlq]
    assert classes == [b"LateChange", b"BadChangeHeaders", b"BadWatermark"]
    staged = [r for r in sent if r["topic"] != "_crossfeed.dlq"]
    assert [dict(r["headers"]).get(headers.COMMIT_TS) for r in staged] == [b"101", b"100"]
    assert task.position(TP) == 5
    with pytest.raises(FeedStopped, match="LateChange"):
        strict = _task("none")
        strict.add(_Msg(0, watermark_headers(100)), strict.partitions[TP])
        strict.add(_change(1, 50), strict.partitions[TP])


def test_without_watermarks_resolved_follows_commit_ts_minus_lateness_and_never_goes_back() -> None:
    task = _task(lateness_ms=1)
    state = task.partitions[TP]
    task.add(_change(0, 5_000), state)
    resolved, hdrs = _mark(_commit(task)[-1])
    assert resolved == 4_000 and headers.RESOLVED_FROM not in hdrs
    task.add(_change(1, 4_500), state)  # above resolved: staged (out of order in partition)
    resolved, _ = _mark(_commit(task)[-1])
    assert resolved == 4_000  # the newest is still 5,000
    task.add(_change(2, 3_999), state)  # below: late
    sent = _commit(task)
    assert [r["topic"] for r in sent] == ["_crossfeed.dlq", "_crossfeed.f.changes"]


def test_a_new_owner_keeps_the_restored_resolved_ts_and_following_watermarks() -> None:
    task = _task()
    state = task.partitions[TP]
    state.restore(9_000, watermarked=True)
    resolved, hdrs = _mark(_commit(task, caught_up=True)[-1])
    assert resolved == 9_000 and hdrs[headers.RESOLVED_FROM] == b"watermarks"
    task.add(_change(0, 8_000), state)  # the previous owner promised 9,000
    assert _commit(task)[0]["topic"] == "_crossfeed.dlq"
    plain = _task()
    plain.partitions[TP].restore(9_000, watermarked=False)
    resolved, _ = _mark(_commit(plain)[-1])
    assert resolved == 9_000  # not back to the (unknown) newest commit_ts


def test_a_failed_task_ends_and_its_next_owner_starts_from_the_committed_mark() -> None:
    task = _task()
    state = task.partitions[TP]
    task.add(_Msg(0, watermark_headers(100)), state)
    _commit(task)
    task.add(_Msg(1, watermark_headers(500)), state)
    task.add(_change(2, 600), state)
    decision = task.failed(TxnFailure.of(RuntimeError("target gone")))
    assert decision.next.value == "restart" and "target gone" in decision.reason
    with pytest.raises(RuntimeError, match="start a new one"):
        task.add(_change(3, 700), state)
    # The next owner restores the committed mark (watermark 100, next offset 1): the
    # watermark at 500 read by the failed task promised nothing.
    again = _task()
    again.partitions[TP].restore(100, watermarked=True)
    again.add(_change(1, 200), again.partitions[TP])
    assert len(again.partitions[TP].staged) == 1


def test_a_record_that_would_not_fit_the_staging_topic_is_a_dead_letter() -> None:
    task = _task(max_bytes=1000)
    state = task.partitions[TP]
    task.add(_Msg(0, None, value=b"x" * 700), state)
    task.add(_Msg(1, None, value=b"x" * 900), state)
    sent = _commit(task)
    assert [r["topic"] for r in sent] == [
        "_crossfeed.dlq",  # a partition's dead letters go out before its changes
        "_crossfeed.f.changes",
        "_crossfeed.f.changes",  # the mark
    ]
    assert dict(sent[0]["headers"])["crossfeed-dlq-error-class"] == b"RecordTooLarge"
    assert staged_size(b"k", b"x" * 700, []) <= 1000 < staged_size(b"k", b"x" * 900, [])


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, 10**6),
            st.integers(0, 10**6),
            st.booleans(),
            st.integers(0, 10**6),
            st.integers(0, 10**4),
        ),
        max_size=30,
    )
)
def test_next_resolved_never_goes_backwards(
    steps: list[tuple[bool, int, int, bool, int, int]],
) -> None:
    previous = 0
    for watermarked, watermark, newest, caught_up, now, lateness in steps:
        value = next_resolved(
            previous=previous,
            watermarked=watermarked,
            watermark_us=watermark,
            newest_commit_ts_us=newest,
            caught_up=caught_up,
            now_us=now,
            lateness_us=lateness,
        )
        assert value >= previous and value >= 0
        if watermarked:
            assert value == max(previous, watermark)
        previous = value


@given(
    st.lists(
        st.tuples(
            st.booleans(),
            st.integers(0, 10**6),
            st.booleans(),
            st.integers(0, 10**6),
            st.integers(0, 10**6),
        ),
        max_size=30,
    )
)
def test_next_resolved_never_passes_the_last_topic_listing(
    steps: list[tuple[bool, int, bool, int, int]],
) -> None:
    """A topic created after the listing may hold changes as old as the listing: no mark
    passes it (unless an earlier mark already did: marks never go back)."""
    previous = 0
    for watermarked, watermark, caught_up, now, known in steps:
        value = next_resolved(
            previous=previous,
            watermarked=watermarked,
            watermark_us=watermark,
            newest_commit_ts_us=now,
            caught_up=caught_up,
            now_us=now,
            lateness_us=0,
            known_until_us=known,
        )
        clock = watermark if watermarked else max(now, watermark)
        assert value == max(previous, min(clock, known))
        previous = value


def test_an_idle_partition_resolves_up_to_the_listing_not_up_to_now():
    # the bank's producer closed (final watermark: it follows the clock), and a new topic
    # created after the last listing is not read yet
    idle = {
        "previous": 5_000,
        "watermarked": False,
        "watermark_us": 6_000,
        "newest_commit_ts_us": 6_000,
        "caught_up": True,
        "now_us": 20_000,
        "lateness_us": 1_000,
    }
    assert next_resolved(**idle, known_until_us=12_000) == 12_000  # type: ignore[arg-type]
    assert next_resolved(**idle, known_until_us=30_000) == 19_000  # type: ignore[arg-type]
    assert next_resolved(**idle) == 19_000  # type: ignore[arg-type]


def test_debezium_values_travel_without_their_schema_which_is_written_once_before_them():
    from crossfeed.wire import debezium

    task = _task(debezium=True)
    state = task.partitions[TP]
    schema = b'{"type":"struct","fields":[],"name":"pg1.public.t.Envelope"}'
    for offset, op in enumerate([b"c", b"u", b"d"]):
        value = b'{"schema":' + schema + b',"payload":{"op":"' + op + b'"}}'
        task.add(_Msg(offset, [(headers.COMMIT_TS, b"%d" % (100 + offset))], value=value), state)
    task.add(_Msg(3, [(headers.COMMIT_TS, b"200")], value=b'{"op":"c"}'), state)  # no schema
    sent = _commit(task)
    assert [r["topic"] for r in sent] == ["_crossfeed.f.schemas"] + ["_crossfeed.f.changes"] * 5
    sid = debezium.schema_id(schema)
    assert sent[0]["key"] == sid and sent[0]["value"] == schema and sent[0]["partition"] == 0
    changes = sent[1:5]
    assert [r["value"] for r in changes] == [
        b'{"op":"c"}',
        b'{"op":"u"}',
        b'{"op":"d"}',
        b'{"op":"c"}',
    ]
    assert [dict(r["headers"]).get(headers.SCHEMA) for r in changes] == [sid, sid, sid, None]
    # The next transaction refers to the schema already written: not written again.
    value = b'{"schema":' + schema + b',"payload":{"op":"t"}}'
    task.add(_Msg(4, [(headers.COMMIT_TS, b"300")], value=value), state)
    assert [r["topic"] for r in _commit(task)] == ["_crossfeed.f.changes"] * 2
