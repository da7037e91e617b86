"""The divergent tail of a failed-over feed (crossfeed/core/divergence.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.divergence import TailEnd, TailEvent, divergent

pytestmark = pytest.mark.unit
T = {"public.t"}


def event(xid: str, lsn: int, order: int = 1, table: str = "public.t") -> TailEvent:
    return TailEvent(xid, lsn, order, table, "u", {"id": lsn}, None, {"id": lsn})


def test_only_transactions_after_the_applied_one_touching_the_feeds_tables():
    ends = [
        TailEnd("10", 100, 1, ("public.t",)),  # applied
        TailEnd("11", 200, 2, ("public.t",)),
        TailEnd("12", 300, 3, ("public.other",)),  # not the feed's
        TailEnd("13", 400, 4, ("public.t", "public.other")),
    ]
    events = [event("10", 90), event("11", 190), event("12", 290), event("13", 390)]
    found = divergent(ends, events, 100, T)
    assert [t.txn_id for t in found] == ["11.200", "13.400"]
    assert [len(t.changes) for t in found] == [1, 1]


def test_each_transaction_once_and_its_changes_in_transaction_order():
    ends = [TailEnd("11", 200, 2, ("public.t",))] * 2  # Debezium sent it again
    events = [event("11", 150, 2), event("11", 120, 1), event("11", 150, 2)]
    (txn,) = divergent(ends, events, 0, T)
    assert [(e.order, e.lsn) for e in txn.changes] == [(1, 120), (2, 150)]


def test_a_reused_xid_goes_to_the_transaction_whose_commit_follows_the_change():
    ends = [TailEnd("7", 200, 2, ("public.t",)), TailEnd("7", 900, 9, ("public.t",))]
    events = [event("7", 150), event("7", 850)]
    first, second = divergent(ends, events, 0, T)
    assert [e.lsn for e in first.changes] == [150]
    assert [e.lsn for e in second.changes] == [850]


@given(
    st.lists(st.integers(1, 10_000), min_size=0, max_size=30, unique=True),
    st.integers(0, 10_000),
)
def test_commit_order_and_the_cut_hold_for_any_ends(lsns, applied):
    ends = [TailEnd(str(n), n, n, ("public.t",)) for n in lsns]
    found = divergent(list(reversed(ends)), [], applied, T)
    assert [t.commit_lsn for t in found] == sorted(n for n in lsns if n > applied)
