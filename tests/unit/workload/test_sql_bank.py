"""How the SQL bank compares a table on the source and on the target, row for row."""

from __future__ import annotations

import pytest

from crossfeed.workload.sql_bank import Sample, Sampler, compare_rows

pytestmark = pytest.mark.unit


def test_equal_tables_say_so_with_their_row_count() -> None:
    rows = [(1, 1000, None), (2, 990, "x")]
    found = compare_rows("accounts", rows, list(rows))
    assert found.equal and (found.source_rows, found.target_rows) == (2, 2)
    assert (found.missing, found.extra) == (0, 0)
    assert found.line() == "accounts: 2 rows on each side, equal"


def test_a_missing_a_different_and_an_extra_row_are_counted() -> None:
    source = [(1, 1000), (2, 990), (3, 1010)]
    target = [(1, 1000), (2, 999), (4, 0)]  # 2 differs, 3 missing, 4 extra
    found = compare_rows("accounts", source, target)
    assert not found.equal
    assert (found.missing, found.extra) == (2, 2)
    assert "3 rows on the source, 3 on the target" in found.line()
    assert "2 missing or different, 2 not on the source" in found.line()


def test_the_same_rows_in_another_order_are_not_equal() -> None:
    # rows() reads both sides in primary-key order: another order means another table
    found = compare_rows("transfers", [(1,), (2,)], [(2,), (1,)])
    assert not found.equal and (found.missing, found.extra) == (0, 0)


def test_an_empty_target_misses_every_row() -> None:
    found = compare_rows("transfers", [(1, None), (2, None)], [])
    assert not found.equal and found.missing == 2 and found.target_rows == 0


def test_rows_with_a_jsonb_value_compare_too() -> None:
    source = [(1, {"session": 0}), (2, {"session": 1})]
    found = compare_rows("transfers", source, [(1, {"session": 0})])
    assert not found.equal and (found.missing, found.extra) == (1, 0)
    assert "{'session': 1}" in found.example
    assert compare_rows("transfers", source, [tuple(r) for r in source]).equal


def test_the_sampler_lets_the_snapshot_arrive_in_parts_and_nothing_else() -> None:
    """Before every account has been on the target, a part of the opening accounts with no
    transfer is the snapshot on its way (docs/cdc.md); anything else is torn, and so is
    every missing account once they have all been there."""
    sampler = Sampler("postgresql://unused", "s", accounts=40, total=40_000)
    sampler._check(Sample(1_000, 1, 0, 0))  # the snapshot's first account
    sampler._check(Sample(20_000, 20, 0, 0))
    assert sampler.torn == [] and sampler.samples == 0
    sampler._check(Sample(25_000, 25, 3, 1))  # a transfer before the snapshot is whole
    assert len(sampler.torn) == 1
    sampler._check(Sample(40_000, 40, 3, 0))
    sampler._check(Sample(39_000, 39, 3, 0))  # an account gone after all were there
    sampler._check(Sample(39_999, 40, 3, 0))  # a transfer applied in part
    assert len(sampler.torn) == 3 and sampler.samples == 4
    assert sampler.transfer_counts == {3}  # the states caught: one number of transfers
    sampler._check(Sample(40_000, 40, 5, 0))
    assert sampler.transfer_counts == {3, 5} and len(sampler.torn) == 3


def test_all_accounts_at_once_start_the_checks() -> None:
    sampler = Sampler("postgresql://unused", "s", accounts=40, total=40_000)
    sampler._check(Sample(40_000, 40, 0, 0))
    sampler._check(Sample(1_000, 1, 0, 0))  # all were there: now one account is torn
    assert len(sampler.torn) == 1
