"""crossfeed/feeds.py: the Debezium prefix a feed reads, and the active-active options."""

from __future__ import annotations

import re

import pytest

from crossfeed.feeds import FeedSpec

pytestmark = pytest.mark.unit


def _feed(topics: list[str], **config: str) -> FeedSpec:
    return FeedSpec.model_validate(
        {
            "name": "f",
            "source": "dc-a",
            "sink-uri": "postgresql://u@h:5432/d?schema=public",
            "topics": topics,
            "mode": "ordered",
            "input": "debezium",
            "config": config,
        }
    )


@pytest.mark.parametrize(
    ("pattern", "prefix"),
    [
        (r"pg1\.public\..*", "pg1"),
        (re.escape("shop-a-ref") + r"\.public\..*", "shop-a-ref"),  # re.escape writes '\-'
        (r"pg_1\.app\.(a|b)", "pg_1"),
    ],
)
def test_the_prefix_is_the_patterns_name_up_to_its_first_dot(pattern: str, prefix: str) -> None:
    assert _feed([pattern]).debezium_prefix() == prefix


def test_an_active_active_side_needs_its_target_side_and_counters_name_table_columns() -> None:
    feed = _feed(
        [r"p\.public\..*"],
        **{
            "active_active.side": "dc-a",
            "active_active.target_side": "dc-b",
            "active_active.counters": "accounts.balance, stock.level",
        },
    )
    assert feed.config.counters() == {
        "accounts": frozenset({"balance"}),
        "stock": frozenset({"level"}),
    }
    with pytest.raises(ValueError, match=r"needs active_active\.target_side"):
        _feed([r"p\.public\..*"], **{"active_active.side": "dc-a"})
    with pytest.raises(ValueError, match="must differ"):
        _feed(
            [r"p\.public\..*"],
            **{"active_active.side": "dc-a", "active_active.target_side": "dc-a"},
        )
    with pytest.raises(ValueError, match=r"must be table\.column"):
        _feed([r"p\.public\..*"], **{"active_active.counters": "balance"})
