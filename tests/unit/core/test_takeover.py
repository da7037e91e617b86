"""crossfeed/core/takeover.py: what a failover of an ordered feed lost."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.takeover import Known, consistency_of, debezium_order, lost, rpo


def test_debezium_txn_ids_give_their_commit_lsn() -> None:
    assert debezium_order("771.24023448") == 24023448
    assert debezium_order("snapshot-3") is None
    assert debezium_order("bank-12") is None
    assert debezium_order("1.2.3") is None  # the xid is digits only
    assert debezium_order(".5") is None


def test_lost_are_after_the_applied_one_once_each_in_commit_order() -> None:
    known = [
        Known("9.300", 300, 3_000),
        Known("7.100", 100, 1_000),  # applied
        Known("8.200", 200, 2_000),
        Known("9.300", 300, 3_000),  # sent again after a crash
    ]
    gone = lost(100, 1_000, known)
    assert [k.txn for k in gone] == ["8.200", "9.300"]


def test_without_an_applied_order_the_commit_time_decides() -> None:
    known = [Known("a", 0, 900), Known("b", 0, 1_000), Known("c", 0, 1_001)]
    assert [k.txn for k in lost(None, 1_000, known)] == ["c"]


def test_rpo_counts_and_spans_the_lost_source_time() -> None:
    known = [Known("1.10", 10, 5_000_000), Known("2.20", 20, 6_500_000)]
    r = rpo(5, 4_000_000, known, exact=True, known_from="dc-a")
    assert (r.transactions, r.first_lost_us, r.last_lost_us) == (2, 5_000_000, 6_500_000)
    assert r.span_s == 2.5
    assert r.text() == "2 source transactions, 2.500s of source time (known from dc-a)"


def test_nothing_lost_and_a_lower_bound_read_as_such() -> None:
    assert rpo(5, 1, [], exact=True, known_from="dc-a").text() == (
        "0 source transactions (known from dc-a)"
    )
    one = rpo(5, 1, [Known("x", 6, 0)], exact=False, known_from="dc-b")
    assert one.text() == "at least 1 source transaction (known from dc-b)"
    assert (one.first_lost_us, one.span_s) == (None, 0.0)  # its commit time is unknown


def test_consistency_is_the_later_of_the_applied_commit_and_the_checkpoint() -> None:
    assert consistency_of(10, 25) == 25
    assert consistency_of(30, 25) == 30


txns = st.lists(
    st.tuples(st.integers(0, 50), st.integers(0, 3)), max_size=60
)  # (order, copies): one transaction per order, sent once or more


@given(txns, st.integers(-1, 51))
def test_the_count_is_the_distinct_transactions_after_the_applied_one(
    spec: list[tuple[int, int]], applied: int
) -> None:
    # commit time (order + 1) ms: a commit time of 0 means "not known" (Known's contract)
    known = [Known(f"{o}.{o}", o, (o + 1) * 1000) for o, copies in spec for _ in range(copies + 1)]
    expected = {o for o, _ in spec if o > applied}
    r = rpo(applied, (applied + 1) * 1000, known, exact=True, known_from="x")
    assert r.transactions == len(expected)
    if expected:
        assert r.last_lost_us == (max(expected) + 1) * 1000
        assert r.first_lost_us == (min(expected) + 1) * 1000
    # what is known from more places never counts less
    more = rpo(
        applied, (applied + 1) * 1000, [*known, Known("new", 99, 1)], exact=False, known_from="x"
    )
    assert more.transactions == len(expected) + 1
