"""Unit tests for the client library: configuration split, headers, stamping."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.client.consumer import _Consumed, split_config, user_headers
from crossfeed.client.destination import split_destination
from crossfeed.client.producer import Change, ChangeProducer
from crossfeed.wire import codec, headers
from tests.support.recording_producer import RecordingProducer

pytestmark = pytest.mark.unit


def test_split_config_gives_the_timestamps_producer_the_connection_settings() -> None:
    consumer, producer, topic = split_config(
        {
            "bootstrap.servers": "a:9092",
            "security.protocol": "SASL_SSL",
            "sasl.username": "app",
            "group.id": "billing",
            "timestamps.producer.sasl.username": "ts-writer",
            "timestamps.producer.linger.ms": 50,
            "timestamps.topic.num.partitions": 3,
        }
    )
    assert consumer == {
        "bootstrap.servers": "a:9092",
        "security.protocol": "SASL_SSL",
        "sasl.username": "app",
        "group.id": "billing",
    }
    assert producer["bootstrap.servers"] == "a:9092"
    assert producer["sasl.username"] == "ts-writer"  # the prefix wins
    assert producer["linger.ms"] == 50 and producer["enable.idempotence"] is True
    assert "group.id" not in producer
    assert topic == {"num.partitions": 3}


def test_user_headers_skip_crossfeed_headers_and_keep_order_and_duplicates() -> None:
    found = [
        ("trace", b"1"),
        (headers.ORIGIN_CLUSTER, b"x"),
        ("trace", None),
        (headers.SRC, b"x/t/0/1"),  # the legacy form
        (headers.PROV, b"x/t/0/1"),
        ("app", "text"),
    ]
    assert user_headers(found) == [("trace", b"1"), ("trace", None), ("app", b"text")]
    assert user_headers(None) == []


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=50, unique=True), st.data())
def test_consumed_finds_the_record_before_a_committed_offset(
    offsets: list[int], data: st.DataObject
) -> None:
    offsets.sort()
    consumed = _Consumed()
    for o in offsets:
        consumed.add(o, o * 10)
    committed = data.draw(st.integers(0, 10_001))
    before = [o for o in offsets if o < committed]
    assert consumed.before(committed) == (before[-1] * 10 if before else None)


def test_consumed_forgets_after_a_seek_backwards() -> None:
    consumed = _Consumed()
    for o in (5, 6, 7):
        consumed.add(o, o)
    consumed.add(2, 99)  # seek back: the later reads are what counts now
    assert consumed.before(8) == 99


def _producer() -> tuple[ChangeProducer, RecordingProducer]:
    producer = ChangeProducer({})  # no bootstrap.servers: librdkafka connects nowhere
    fake = RecordingProducer()
    producer._producer = fake  # type: ignore[assignment]
    return producer, fake


def test_transactions_share_one_commit_ts_and_number_their_changes() -> None:
    producer, fake = _producer()
    _, ts = producer.transaction(
        [
            Change("t", b"1", headers=[(headers.COMMIT_TS, b"1"), ("app", b"a")]),
            Change("t", b"2", partition=1),
        ],
        txn_id="x",
    )
    stamped = [dict(r["headers"]) for r in fake.records]
    assert [h[headers.COMMIT_TS] for h in stamped] == [str(ts).encode()] * 2
    assert [h[headers.TXN] for h in stamped] == [b"x/1/2", b"x/2/2"]
    assert stamped[0]["app"] == b"a"  # user headers kept; a stale commit-ts replaced
    assert [r.get("partition") for r in fake.records] == [None, 1]
    single = producer.send("t", b"3")
    assert single > ts and headers.TXN not in dict(fake.records[-1]["headers"])


def test_watermarks_cover_every_partition_and_fence_later_changes() -> None:
    producer, fake = _producer()
    last = producer.send("t", b"1")
    resolved = producer.resolved()
    marks = fake.records[1:]
    assert resolved == last and [m["partition"] for m in marks] == [0, 1]
    for mark in marks:
        assert dict(mark["headers"])[headers.TYPE] == headers.TYPE_RESOLVED.encode()
        value = codec.decode("ResolvedMark", mark["value"])
        assert value["resolved_ts_us"] == resolved and value["next_offset"] == -1
    with pytest.raises(ValueError, match="watermark"):
        producer.send("t", b"late", commit_ts_us=resolved)
    assert producer.send("t", b"next") > resolved
    with pytest.raises(ValueError, match="below"):
        producer.resolved(ts_us=resolved - 1)
    with pytest.raises(ValueError, match="'/'"):
        producer.transaction([Change("t", b"1")], txn_id="a/b")
    with pytest.raises(ValueError, match="at least one"):
        producer.transaction([])


def _marks(fake: RecordingProducer) -> list[tuple[str, int, int]]:
    """(topic, partition, resolved_ts) of every watermark written, in order."""
    return [
        (r["topic"], r["partition"], codec.decode("ResolvedMark", r["value"])["resolved_ts_us"])
        for r in fake.records
        if dict(r["headers"]).get(headers.TYPE) == headers.TYPE_RESOLVED.encode()
    ]


def test_a_new_topic_is_announced_before_its_first_change_is_stamped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from crossfeed.client import producer as module

    producer, fake = _producer()
    producer.resolved_interval_s = 60.0
    clock = [1_000_000]
    monkeypatch.setattr(module, "_now_us", lambda: clock[0])
    listed = fake.list_topics

    def slow_metadata(topic: str, timeout: float) -> Any:
        clock[0] += 5_000_000  # the broker took 5 s to answer
        return listed(topic, timeout)

    def slow_delivery(timeout: float) -> int:
        clock[0] += 2_000_000  # and 2 s to give the producer its id and take the marks
        return 0

    fake.list_topics = slow_metadata  # type: ignore[method-assign]
    fake.flush = slow_delivery  # type: ignore[method-assign]
    _, ts = producer.transaction([Change("t", b"1")])
    assert ts == 8_000_000  # stamped once the announcement landed, not 7 s before
    assert [r["partition"] for r in fake.records] == [0, 1, None]  # marks, then the change


def test_closing_resolves_every_partition_past_the_last_transaction() -> None:
    producer, fake = _producer()
    producer.resolved_interval_s = 60.0  # no round falls due while the test runs
    producer.watch(["quiet"])
    _, ts = producer.transaction([Change("t", b"1", partition=1)])
    before = len(_marks(fake))
    producer.close()
    final = _marks(fake)[before:]
    assert sorted((topic, partition) for topic, partition, _ in final) == [
        ("quiet", 0),
        ("quiet", 1),
        ("t", 0),
        ("t", 1),
    ]
    assert all(mark >= ts for _, _, mark in final)  # the last transaction is released
    finals = [r for r in fake.records if dict(r["headers"]).get(headers.WATERMARK) == b"final"]
    assert len(finals) == 4  # only the closing round says the producer is gone
    producer.close()
    assert len(_marks(fake)) == before + 4  # a second close writes nothing more


def test_closing_a_producer_with_its_own_timestamps_resolves_no_further_than_them() -> None:
    producer, fake = _producer()
    producer.resolved_interval_s = 60.0
    producer.send("t", b"1", commit_ts_us=1_000)
    producer.close()
    assert {mark for _, _, mark in _marks(fake)[-2:]} == {1_000}  # not the clock


def test_closing_a_producer_without_watermarks_writes_none() -> None:
    producer, fake = _producer()  # no interval, resolved() never called
    producer.send("t", b"1")
    producer.close()
    assert _marks(fake) == []  # its partitions stay on record timestamps


def test_a_producer_left_open_is_closed_at_a_clean_exit() -> None:
    from crossfeed.client import producer as module

    producer, fake = _producer()
    producer.resolved_interval_s = 60.0
    producer.send("t", b"1")
    assert producer in module._OPEN
    module._close_open_producers()  # what atexit runs
    assert producer not in module._OPEN
    assert [p for _, p, _ in _marks(fake)[-2:]] == [0, 1]


def test_the_destination_opt_in_is_off_without_its_keys() -> None:
    rest, destination = split_destination({"bootstrap.servers": "a:9092", "group.id": "g"})
    assert destination is None and rest == {"bootstrap.servers": "a:9092", "group.id": "g"}


def test_the_destination_opt_in_takes_its_own_keys_and_nothing_of_the_consumer() -> None:
    rest, destination = split_destination(
        {
            "bootstrap.servers": "a:9092",
            "sasl.username": "app",
            "group.id": "g",
            "timestamps.destination.bootstrap.servers": "b:9092",
            "timestamps.destination.sasl.username": "app-b",
            "timestamps.destination.wait.ms": 250,
        }
    )
    assert rest == {"bootstrap.servers": "a:9092", "sasl.username": "app", "group.id": "g"}
    assert destination is not None
    assert destination.wait_s == 0.25
    assert destination.producer["bootstrap.servers"] == "b:9092"
    assert destination.producer["sasl.username"] == "app-b"
    assert destination.producer["acks"] == "all" and "wait.ms" not in destination.producer
    _, default = split_destination({"timestamps.destination.bootstrap.servers": "b:9092"})
    assert default is not None and default.wait_s == 1.0


@pytest.mark.parametrize("wait", [-1, "soon", 1.5, True, None])
def test_a_bad_destination_wait_is_refused_with_what_to_write(wait: Any) -> None:
    with pytest.raises(ValueError, match=r"timestamps\.destination\.wait\.ms must be a whole"):
        split_destination(
            {
                "timestamps.destination.bootstrap.servers": "b:9092",
                "timestamps.destination.wait.ms": wait,
            }
        )


def test_destination_settings_without_a_destination_are_refused() -> None:
    with pytest.raises(ValueError, match=r"timestamps\.destination\.bootstrap\.servers is needed"):
        split_destination({"timestamps.destination.wait.ms": 100})
