"""tests/support/bank.py: the ordered-target checker passes a faithful target and catches
a reordered, partial, duplicated, missing or interleaved transaction."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.client.producer import row_change, stamp_transaction
from crossfeed.wire import headers
from crossfeed.wire.changes import Column, Table
from crossfeed.workload.bank import ACCOUNTS, Bank, Summary
from tests.support.bank import OrderedChecker, apply_change, verify_bank
from tests.support.verify import Record

pytestmark = pytest.mark.unit


def _target(
    accounts: int, transfers: int, seed: int
) -> tuple[list[list[Record]], Summary, dict[int, int]]:
    """What a faithful ordered target holds: the transactions in commit order, each a
    list of records."""
    bank = Bank(accounts, 4, "bank", 100, seed)
    txns = [bank.opening()]
    for _ in range(transfers):
        t = bank.next_transfer()
        txns.append((t.txn, bank.transfer_changes(t)))
    out: list[list[Record]] = []
    for n, (txn, changes) in enumerate(txns):
        ts = 1_000_000 + n * 10
        out.append(
            [
                Record("out", 0, 0, r.key, r.value, tuple(r.headers))
                for r in stamp_transaction(changes, txn, ts)
            ]
        )
    summary = Summary(
        "bank",
        bank.run_id,
        4,
        accounts,
        bank.transactions,
        bank.events,
        bank.total,
        1_000_000,
        1_000_000 + transfers * 10,
        1.0,
    )
    return out, summary, bank.expected_balances()


def _flat(txns: list[list[Record]]) -> list[Record]:
    return [r for txn in txns for r in txn]


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 12), st.integers(0, 25), st.integers(0, 1000))
def test_a_faithful_target_passes(accounts: int, transfers: int, seed: int) -> None:
    txns, summary, balances = _target(accounts, transfers, seed)
    report = verify_bank(_flat(txns), summary, balances)
    report.assert_ok()
    assert report.transactions == transfers + 1 and report.received == accounts + 2 * transfers


MUTATIONS = ("swap", "partial", "duplicate", "missing", "interleave", "seq_order", "unbalanced")


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(MUTATIONS), st.integers(2, 10), st.integers(2, 20), st.data())
def test_every_kind_of_damage_is_caught(
    mutation: str, accounts: int, transfers: int, data: st.DataObject
) -> None:
    txns, summary, balances = _target(accounts, transfers, data.draw(st.integers(0, 1000)))
    i = data.draw(st.integers(1, len(txns) - 2))  # a transfer with a successor
    if mutation == "swap":
        txns[i], txns[i + 1] = txns[i + 1], txns[i]
        expect = "out_of_order"
    elif mutation == "partial":
        del txns[i][data.draw(st.integers(0, 1))]
        expect = "partial"
    elif mutation == "duplicate":
        txns.insert(data.draw(st.integers(i + 1, len(txns))), list(txns[i]))
        expect = "duplicated"
    elif mutation == "missing":
        del txns[i]
        expect = "missing"
    elif mutation == "interleave":
        first, second = txns[i], txns[i + 1]
        txns[i : i + 2] = [[first[0], second[0]], [first[1], second[1]]]
        expect = "not_contiguous"
    elif mutation == "seq_order":
        txns[i].reverse()
        expect = "out_of_order"
    else:  # a transfer whose second change moved a different amount
        account = int(txns[i][1].key or b"0")
        event = ACCOUNTS.update(None, {"id": account, "balance": 10**6})
        old = txns[i][1]
        txns[i][1] = Record(old.topic, 0, 0, old.key, row_change("bank", event).value, old.headers)
        expect = "unbalanced"
    report = verify_bank(_flat(txns), summary, balances)
    assert not report.ok
    assert getattr(report, expect) >= 1, report.summary()


def test_markers_are_skipped_and_a_change_without_txn_is_a_transaction_of_its_own() -> None:
    table = Table("kv", (Column("k", "string", primary_key=True), Column("v", "long")))
    event = table.insert({"k": "a", "v": 1})
    value = row_change("t", event).value
    src = (headers.PROV, b"cluster/t/0/5")
    records = [
        Record("o", 0, 0, None, None, ((headers.TYPE, b"begin"),)),
        Record("o", 0, 1, b"a", value, ((headers.COMMIT_TS, b"10"), src)),
        Record("o", 0, 2, None, None, ((headers.TYPE, b"resolved"),)),
        Record("o", 0, 3, b"a", value, ((headers.COMMIT_TS, b"10"), src)),
    ]
    checker = OrderedChecker(table="kv").add_all(records)
    report = checker.finish()
    assert report.markers == 2 and report.transactions == 1
    assert report.duplicated == 1  # the same source record twice
    assert checker.tables == {"kv": {("a",): {"k": "a", "v": 1}}}


def test_apply_change_inserts_updates_deletes() -> None:
    tables: dict = {}
    apply_change(tables, ACCOUNTS.insert({"id": 1, "balance": 5}))
    apply_change(tables, ACCOUNTS.update(None, {"id": 1, "balance": 7}))
    apply_change(tables, ACCOUNTS.insert({"id": 2, "balance": 1}))
    assert tables["accounts"] == {(1,): {"id": 1, "balance": 7}, (2,): {"id": 2, "balance": 1}}
    apply_change(tables, ACCOUNTS.delete({"id": 1}))
    assert tables["accounts"] == {(2,): {"id": 2, "balance": 1}}
