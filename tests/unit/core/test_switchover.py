"""The pure rules of a switchover (crossfeed/core/switchover.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.switchover import (
    Digest,
    comparable_columns,
    differing,
    drained,
    reverse_name,
)

pytestmark = pytest.mark.unit


def test_reverse_names_count_generations_and_never_repeat():
    assert reverse_name("bank") == "bank-r1"
    assert reverse_name("bank-r1") == "bank-r2"
    assert reverse_name("bank-r9") == "bank-r10"
    assert reverse_name("my-rows") == "my-rows-r1"  # "-rows" is not a generation


@given(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,40}", fullmatch=True))
def test_a_chain_of_switchovers_gives_distinct_names(name):
    seen = {name}
    for _ in range(5):
        name = reverse_name(name)
        assert name not in seen
        seen.add(name)


def test_a_reverse_name_too_long_for_a_feed_is_refused():
    with pytest.raises(ValueError, match="--reverse-name"):
        reverse_name("x" * 62)


def test_tables_differ_by_digest_or_by_absence():
    a = {"t": Digest(2, "x"), "u": Digest(1, "y")}
    assert differing(a, dict(a)) == []
    assert differing(a, {"t": Digest(2, "x"), "u": Digest(1, "z")}) == ["u"]
    assert differing(a, {"t": Digest(2, "x")}) == ["u"]
    assert differing({}, {"v": Digest(0, "")}) == ["v"]


def test_drained_once_consistency_reaches_the_freeze():
    assert not drained(99, 100)
    assert drained(100, 100)
    assert drained(101, 100)


def test_digests_cover_the_sources_columns_without_hidden_ones():
    hidden = frozenset({"_crossfeed_commit_ts"})
    assert comparable_columns(["id", "v"], ["v", "id", "_crossfeed_commit_ts"], hidden) == [
        "id",
        "v",
    ]
    assert comparable_columns(["id", "_crossfeed_commit_ts"], ["id"], hidden) == ["id"]
    assert comparable_columns(["id", "w"], ["id"], hidden) is None
