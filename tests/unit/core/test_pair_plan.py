"""crossfeed/core/pair_plan.py: the names and feed bodies of ``crossfeed pair create``."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.cdc.connector import PREFIX_RE, connector_config
from crossfeed.core.pair_plan import (
    PairPlan,
    Side,
    check_counters,
    check_database,
    check_name,
    feed_names,
    split_tables,
    tables_of_topics,
)
from crossfeed.feeds import FEED_NAME_RE, parse_feed

A_DB = "postgresql://app@10.0.0.1:5432/shop"
B_DB = "postgresql://app:secret@10.0.1.1:5432/shop"


def plan(name: str = "shop", tables: tuple[str, ...] = ("accounts", "orders")) -> PairPlan:
    return PairPlan(
        name,
        Side("a", A_DB, "dc-a", "http://connect-a:8083"),
        Side("b", B_DB, "dc-b", "http://connect-b:8083"),
        "public",
        tables,
        ("accounts.balance",),
    )


def test_the_feeds_are_one_per_direction_into_the_other_database() -> None:
    p = plan()
    a_to_b, b_to_a = p.feed_body(p.a), p.feed_body(p.b)
    assert (a_to_b["name"], b_to_a["name"]) == feed_names("shop") == ("shop-a-to-b", "shop-b-to-a")
    assert a_to_b["source"] == "dc-a" and a_to_b["sink-uri"] == B_DB + "?schema=public"
    assert b_to_a["source"] == "dc-b" and b_to_a["sink-uri"] == A_DB + "?schema=public"
    assert a_to_b["config"]["active_active.side"] == "dc-a"
    assert a_to_b["config"]["active_active.target_side"] == "dc-b"
    assert b_to_a["config"]["active_active.side"] == "dc-b"
    assert b_to_a["config"]["active_active.target_side"] == "dc-a"
    for body in (a_to_b, b_to_a):
        assert body["config"]["active_active.pair"] == "shop"
        assert body["config"]["active_active.counters"] == "accounts.balance"
        spec = parse_feed(body, "test")  # what the coordinator accepts
        assert spec.input == "debezium" and spec.mode == "ordered"
        assert spec.config.staging_partitions == 1


def test_each_feed_reads_exactly_its_own_connectors_table_topics() -> None:
    p = plan()
    spec = parse_feed(p.feed_body(p.a), "test")
    assert spec.debezium_prefix() == "shop-a"
    names = [
        "shop-a.public.accounts",
        "shop-a.public.orders",
        "shop-a.public.crossfeed_conflicts",
        "shop-a.public.accountsx",
        "shop-b.public.accounts",
        "shop-a.transaction",
        "shopxa.public.accounts",
    ]
    assert spec.selector.select(names) == ["shop-a.public.accounts", "shop-a.public.orders"]


def test_connector_names_prefixes_and_slots_follow_the_connectors_rules() -> None:
    p = plan()
    assert (p.connector(p.a), p.prefix(p.a)) == ("shop-a", "shop-a")
    assert p.slot(p.a) == "crossfeed_shop_a"
    config = connector_config(p.a.database, p.prefix(p.a), tables=p.include_list())
    assert config["slot.name"] == p.slot(p.a)
    assert config["publication.autocreate.mode"] == "filtered"
    assert config["table.include.list"] == r"public\.accounts,public\.orders"
    for pattern in config["table.include.list"].split(","):
        assert not re.fullmatch(pattern, "public.crossfeed_tombstones")


@given(st.from_regex(r"[a-z0-9][a-z0-9-]{0,49}", fullmatch=True))
def test_every_valid_pair_name_makes_valid_feed_names_prefixes_and_slots(name: str) -> None:
    p = plan(check_name(name))
    for side in (p.a, p.b):
        assert FEED_NAME_RE.match(p.feed_name(side))
        assert PREFIX_RE.match(p.prefix(side))
        assert len(p.slot(side)) <= 63
        assert tables_of_topics(p.topics(side), p.prefix(side), "public") == list(p.tables)


names = st.text(alphabet="abcXYZ019_-.$ \\\"'", min_size=1, max_size=12)


@given(schema=names, tables=st.lists(names, min_size=1, max_size=4, unique=True))
def test_a_feeds_topics_give_back_its_tables_whatever_their_names(
    schema: str, tables: list[str]
) -> None:
    p = PairPlan(
        "shop",
        Side("a", A_DB, "dc-a", ""),
        Side("b", B_DB, "dc-b", ""),
        schema,
        tuple(tables),
    )
    topics = p.topics(p.a)
    assert tables_of_topics(topics, "shop-a", schema) == tables
    assert parse_feed(p.feed_body(p.a), "t").sink.schema_name == schema
    # Each pattern selects exactly its own table's topic, never another's.
    for table, pattern in zip(tables, topics, strict=True):
        assert re.fullmatch(pattern, f"shop-a.{schema}.{table}")
        for other in tables:
            if other != table:
                assert not re.fullmatch(pattern, f"shop-a.{schema}.{other}")


def test_a_topic_pattern_of_another_prefix_or_schema_is_not_a_pairs() -> None:
    p = plan()
    with pytest.raises(ValueError, match="not one of pair prefix"):
        tables_of_topics(p.topics(p.a), "shop-b", "public")
    with pytest.raises(ValueError, match="not one of pair prefix"):
        tables_of_topics(p.topics(p.a), "shop-a", "other")
    with pytest.raises(ValueError, match="not one of pair prefix"):
        tables_of_topics(["shop-a\\.public\\.acc.*"], "shop-a", "public")


@pytest.mark.parametrize("bad", ["", "Shop", "shop_1", "-shop", "x" * 51, "shop.eu"])
def test_bad_pair_names_are_refused_with_what_they_name(bad: str) -> None:
    with pytest.raises(ValueError, match="NAME-a-to-b"):
        check_name(bad)


def test_database_uris() -> None:
    assert check_database("postgres://u@h:1/db", "--a-database") == "postgresql://u@h:1/db"
    for bad in ("postgresql://u@h:1/db?schema=x", "mysql://u@h/db", "postgresql://u@h:1"):
        with pytest.raises(ValueError, match="--a-database"):
            check_database(bad, "--a-database")
    with pytest.raises(ValueError) as err:
        check_database("postgresql://u:hunter2@h:1/db?x=1", "--b-database")
    assert "hunter2" not in str(err.value)


def test_tables_are_of_one_schema_and_never_crossfeeds_own() -> None:
    assert split_tables(["public.a", "b", "public.a"], "public") == ("public", ["a", "b"])
    assert split_tables(["s.a"], "public") == ("s", ["a"])
    with pytest.raises(ValueError, match="one schema"):
        split_tables(["s.a", "t.b"], "public")
    with pytest.raises(ValueError, match="bookkeeping"):
        split_tables(["public.crossfeed_tombstones"], "public")
    with pytest.raises(ValueError, match="--all-tables"):
        split_tables([], "public")
    with pytest.raises(ValueError, match=r"schema\.table"):
        split_tables(["a.b.c"], "public")


def test_counters_must_be_of_the_pairs_tables() -> None:
    assert check_counters(["accounts.balance"], ["accounts"]) == ("accounts.balance",)
    with pytest.raises(ValueError, match="not one of the pair's tables"):
        check_counters(["stock.level"], ["accounts"])
