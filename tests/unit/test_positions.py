"""crossfeed/positions.py: which target records are this feed's copies (the puller's
resume checks read the source offsets of the copies at the end of a target partition)."""

from __future__ import annotations

import pytest

from crossfeed.positions import _copy_source
from crossfeed.wire.headers import HOPS, ORIGIN_CLUSTER, ORIGIN_TOPIC, PROV, SRC

pytestmark = pytest.mark.unit

SOURCE = ("A", "orders", 3)


def test_a_copy_of_the_current_form_names_its_source_offset() -> None:
    assert _copy_source(SOURCE, [("u", b"1"), (PROV, b"A/orders/3/42")]) == 42
    assert _copy_source(SOURCE, [(PROV, b"C,A/orders/3/42/c.orders")]) == 42


def test_a_copy_an_older_puller_wrote_names_its_source_offset() -> None:
    legacy = [
        (ORIGIN_CLUSTER, b"A"),
        (ORIGIN_TOPIC, b"orders"),
        (HOPS, b"A"),
        (SRC, b"A/orders/3/7"),
    ]
    assert _copy_source(SOURCE, legacy) == 7


@pytest.mark.parametrize(
    "hdrs",
    [
        None,
        [("u", b"1")],
        [(PROV, b"B/orders/3/42")],  # another cluster's
        [(PROV, b"A/orders/4/42")],  # another partition's
        [(PROV, b"A,B/orders/3/42")],  # read on B: B's copy, not A's
        [(PROV, b"A/orders/3/x")],
        [(SRC, b"A/other/3/42")],
        [(PROV, b"A/orders/3/42"), (PROV, None)],  # the last one decides
    ],
)
def test_other_records_are_not_copies(hdrs: list[tuple[str, bytes | None]] | None) -> None:
    assert _copy_source(SOURCE, hdrs) is None


def test_the_last_provenance_header_decides() -> None:
    assert _copy_source(SOURCE, [(SRC, b"X/o/0/1"), (PROV, b"A/orders/3/5")]) == 5
    assert _copy_source(SOURCE, [(PROV, b"X/o/0/1"), (SRC, b"A/orders/3/5")]) == 5
