"""The bank workload's pure parts: transfers (bank.py invariants A-C), skew scheduling
(skew.py invariants A-C) and the skewed producer's routing, with Kafka faked."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.wire import headers
from crossfeed.wire.changes import decode_change, parse_txn
from crossfeed.workload.bank import Bank, Summary, partition_of
from crossfeed.workload.run import SkewedChangeProducer
from crossfeed.workload.skew import DelayLine
from tests.support.recording_producer import RecordingProducer

pytestmark = pytest.mark.unit


@settings(max_examples=60, deadline=None)
@given(
    accounts=st.integers(2, 60),
    partitions=st.integers(2, 12),
    initial=st.integers(1, 300),
    seed=st.integers(0, 2**32),
    transfers=st.integers(0, 150),
)
def test_transfers_keep_the_total_and_cross_partitions(
    accounts: int, partitions: int, initial: int, seed: int, transfers: int
) -> None:
    bank = Bank(accounts, partitions, "t", initial, seed)
    txn, opening = bank.opening()
    assert txn == f"{bank.run_id}-0" and len(opening) == accounts
    assert [c.partition for c in opening] == [partition_of(a, partitions) for a in range(accounts)]
    for n in range(1, transfers + 1):
        t = bank.next_transfer()
        assert t.txn == f"{bank.run_id}-{n}"
        assert t.source != t.dest
        assert t.source % partitions != t.dest % partitions  # B
        assert t.amount >= 1
        changes = bank.transfer_changes(t)
        events = [decode_change(c.value or b"") for c in changes]
        assert [c.partition for c in changes] == [t.source % partitions, t.dest % partitions]
        assert [e.key["id"] for e in events] == [t.source, t.dest]
        assert [c.key for c in changes] == [str(t.source).encode(), str(t.dest).encode()]
        moved = [e.after["balance"] - e.before["balance"] for e in events]  # type: ignore[index]
        assert moved == [-t.amount, t.amount]
        assert sum(bank.balances) == bank.total == accounts * initial  # A
        assert min(bank.balances) >= 0
    assert bank.transactions == transfers + 1
    assert bank.events == accounts + 2 * transfers
    replay = Bank(accounts, partitions, "t", initial, seed, run_id=bank.run_id)  # C
    replay.opening()
    for _ in range(transfers):
        replay.next_transfer()
    assert replay.balances == bank.balances


@settings(max_examples=40, deadline=None)
@given(
    accounts=st.integers(2, 40),
    partitions=st.integers(2, 8),
    seed=st.integers(0, 2**32),
    before=st.integers(0, 30),
    ahead=st.integers(0, 60),
)
def test_changes_built_ahead_are_the_next_transfers_and_leave_the_bank_as_it_was(
    accounts: int, partitions: int, seed: int, before: int, ahead: int
) -> None:
    bank = Bank(accounts, partitions, "t", 50, seed)
    twin = Bank(accounts, partitions, "t", 50, seed, run_id=bank.run_id)
    for b in (bank, twin):
        b.opening()
        for _ in range(before):
            b.next_transfer()
    built = bank.changes_ahead(ahead)
    assert (bank.balances, bank.transactions, bank.events) == (
        twin.balances,
        twin.transactions,
        twin.events,
    )
    for changes in built:
        transfer = bank.next_transfer()
        assert changes == twin.transfer_changes(twin.next_transfer())
        assert changes == bank.transfer_changes(transfer)
    assert bank.balances == twin.balances and bank.events == twin.events


def test_bank_refuses_what_cannot_cross_partitions() -> None:
    with pytest.raises(ValueError, match="2 partitions"):
        Bank(10, 1, "t")
    with pytest.raises(ValueError, match="2 accounts"):
        Bank(1, 8, "t")
    with pytest.raises(ValueError, match="run id"):
        Bank(2, 2, "t", run_id="a:b")
    bank = Bank(2, 8, "t")
    with pytest.raises(RuntimeError, match="opening"):
        bank.next_transfer()


def test_summary_names_every_transaction_and_its_size() -> None:
    summary = Summary("t", "r", 8, 5, 3, 9, 5000, 1, 2, 1.5)
    assert summary.txn_ids() == ["r-0", "r-1", "r-2"]
    assert summary.txn_counts() == {"r-0": 5, "r-1": 2, "r-2": 2}
    assert summary.as_dict()["transactions_per_s"] == 2.0


PUTS = st.lists(
    st.tuples(st.integers(0, 4), st.floats(0, 2, allow_nan=False)), min_size=0, max_size=60
)


@given(PUTS, st.dictionaries(st.integers(0, 4), st.floats(0, 1, allow_nan=False)))
def test_delay_line_releases_everything_once_in_order_never_early(
    puts: list[tuple[int, float]], delays: dict[int, float]
) -> None:
    line: DelayLine[tuple[int, int]] = DelayLine(delays)
    now = 0.0
    held_at: dict[tuple[int, int], float] = {}
    out: list[tuple[int, int]] = []
    for i, (partition, step) in enumerate(puts):
        now += step
        for item in line.due(now):
            assert now >= held_at[item] + delays[item[0]] - 1e-9  # C: never early
            out.append(item)
        item = (partition, i)
        if line.put(partition, item, now):
            assert delays.get(partition, 0) > 0
            held_at[item] = now
        else:
            assert delays.get(partition, 0) == 0  # C: never held without a delay
            out.append(item)
    due = line.next_due()
    assert (due is None) == (len(line) == 0)
    out.extend(line.drain())
    assert len(line) == 0 and line.next_due() is None
    assert sorted(out) == sorted((p, i) for i, (p, _) in enumerate(puts))  # A
    for partition in range(5):  # B
        mine = [i for p, i in out if p == partition]
        assert mine == sorted(mine)


def test_delay_line_refuses_negative_delays() -> None:
    with pytest.raises(ValueError, match="negative"):
        DelayLine({0: -1.0})


def test_skewed_producer_holds_one_partitions_changes_and_watermarks_in_order() -> None:
    clock = [0.0]
    producer = SkewedChangeProducer(
        {},  # no bootstrap.servers: librdkafka connects nowhere (a fake replaces it)
        {1: 0.5},
        clock=lambda: clock[0],
        resolved_interval_s=0.1,
    )
    fake = RecordingProducer(partitions=3)
    producer._producer = fake  # type: ignore[assignment]
    producer.resolved(["t"], 0)  # the first watermarks, before any skew
    assert [r["partition"] for r in fake.records] == [0, 1, 2]
    producer.holding = True
    bank = Bank(6, 3, "t", seed=1)
    txn, changes = bank.opening()
    producer.transaction(changes, txn_id=txn)
    assert all(r["partition"] != 1 for r in fake.records[3:])
    assert len(producer.line) == 2  # accounts 1 and 4 live in partition 1
    clock[0] = 0.2
    assert producer.tick(now=10.0) is not None  # watermarks: 0 and 2 now, 1 held
    assert len(producer.line) == 3
    assert producer.release() == 3  # nothing due yet
    clock[0] = 0.7
    assert producer.release() == 0
    late = [r for r in fake.records if r["partition"] == 1]
    kinds = [dict(r["headers"]).get(headers.TYPE) for r in late]
    assert kinds == [b"resolved", None, None, b"resolved"]  # in the order written
    stamps = [int(dict(r["headers"])[headers.COMMIT_TS]) for r in late]
    assert stamps == sorted(stamps)
    assert parse_txn(dict(late[1]["headers"])[headers.TXN]).count == 6
    producer.close()  # the final watermarks go out at once, the skewed partition's too
    finals = [r for r in fake.records if dict(r["headers"]).get(headers.WATERMARK) == b"final"]
    assert [r["partition"] for r in finals] == [0, 1, 2] and not producer.line
    with pytest.raises(ValueError, match="non-transactional"):
        SkewedChangeProducer({"transactional.id": "x"}, {1: 0.5})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--skew-partition", "1"], "go together"),
        (["--skew-ms", "100"], "go together"),
        (["--bootstrap", "127.0.0.1:1", "--cluster", "dc-a"], "not both"),
        (["--accounts", "1"], "accounts"),
        (["--partitions", "1"], "partitions"),
    ],
)
def test_workload_bank_cli_refuses_bad_flags_before_touching_kafka(
    args: list[str], message: str
) -> None:
    from typer.testing import CliRunner

    from crossfeed.cli.main import app

    result = CliRunner().invoke(app, ["workload", "bank", "--topic", "t", *args])
    assert result.exit_code != 0
    assert message in result.output
