"""The CDC demo's summary (what makes it exit 1) and its live row."""

from __future__ import annotations

import pytest

from crossfeed.demo import display
from crossfeed.demo.cdc import CdcSummary
from crossfeed.workload.sql_bank import compare_rows

pytestmark = pytest.mark.unit


def _summary(**changes: object) -> CdcSummary:
    found = CdcSummary(
        transactions=3,
        snapshot_transfers=1,
        tables=[
            compare_rows("accounts", [(1, 5), (2, 5)], [(1, 5), (2, 5)]),
            compare_rows("transfers", [(1,), (2,), (3,)], [(1,), (2,), (3,)]),
        ],
        samples=40,
        seconds_to_apply=2.5,
    )
    for name, value in changes.items():
        setattr(found, name, value)
    return found


def test_a_run_where_everything_held_is_ok() -> None:
    summary = _summary()
    assert summary.equal and summary.ok
    text = "\n".join(summary.lines())
    assert "transactions written on the source        3  (1 before the snapshot)" in text
    assert "accounts rows, source / target" in text and "2 / 2" in text
    assert "transfers rows, source / target" in text and "3 / 3" in text
    assert "torn samples                              0" in text
    assert "tables equal, row for row               yes" in text
    assert summary.as_dict()["ok"] is True


@pytest.mark.parametrize(
    "changes",
    [
        {"torn": ["99 accounts, total 99000 (expected 100000), 0 of 5 ledger rows"]},
        {"tables": [compare_rows("transfers", [(1,), (2,)], [(1,)])]},
        {"tables": []},  # nothing compared is not "equal"
        {"samples": 0},
        {"errors": ["session 2: connection lost"]},
    ],
)
def test_anything_that_did_not_hold_makes_it_not_ok(changes: dict[str, object]) -> None:
    summary = _summary(**changes)
    assert not summary.ok
    assert summary.as_dict()["ok"] is False


def test_a_difference_is_named_in_the_summary() -> None:
    summary = _summary(tables=[compare_rows("transfers", [(1,), (2,)], [(1,)])])
    text = "\n".join(summary.lines())
    assert "tables equal, row for row                NO" in text
    assert "differs: transfers: 2 rows on the source, 1 on the target" in text


def test_the_live_row_shows_rows_on_both_sides_and_the_samples() -> None:
    row = display._cdc_row(
        {
            "elapsed": 12.2,
            "status": {"state": "normal"},
            "source": (100, 1234),
            "target": (100, 1200),
            "samples": 1500,
            "torn": 0,
        }
    )
    assert row == ["12 s", "normal", "-", "100 / 1,234", "100 / 1,200", "1,500 (0 torn)"]
    assert len(row) == len(display.CDC_HEADERS)
    starting = display._cdc_row({"source": None})
    assert starting[1] == "starting" and starting[3] == "-" and starting[4] == "-"
