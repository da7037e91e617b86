"""``/v1/pairs`` over a fake coordinator: what is refused before any database is asked,
the error bodies, and the pair's view of the feeds (unmasked sink URIs inside only)."""

from __future__ import annotations

from typing import Any

import pytest

from crossfeed.core.pair_plan import PairPlan, Side
from crossfeed.feeds import parse_feed
from crossfeed.pair import ops
from crossfeed.services.coordinator.pairs import CoordinatorFeeds
from tests.unit.coordinator.test_api import FakeControl, auth, client

pytestmark = pytest.mark.unit

PAIR = {
    "name": "shop",
    "a_database": "postgresql://app@a.example:5432/shop",
    "b_database": "postgresql://app:SECRET@b.example:5432/shop",
    "tables": ["public.accounts"],
    "connect_a": "http://ca:8083",
    "connect_b": "http://cb:8083",
}


def shop_plan() -> PairPlan:
    """The pair PAIR makes once its tables are known (no Connect URLs: not asked)."""
    return PairPlan(
        "shop",
        Side("a", PAIR["a_database"], "dc-a", ""),
        Side("b", PAIR["b_database"], "dc-b", ""),
        "public",
        ("accounts", "orders"),
        ("accounts.balance",),
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"name": "Shop_1"}, "pair name 'Shop_1'"),
        ({"b_database": PAIR["a_database"]}, "name the same database"),
        ({"b_cluster": "dc-a"}, "--a-cluster and --b-cluster must differ"),
        ({"all_tables": True}, "not both"),
        ({"tables": ["a.x", "b.y"]}, "one schema"),
        ({"counters": ["stock.level"]}, "not one of the pair's tables"),
        ({"a_database": "postgresql://u:pw@h:1/db?sslmode=x"}, "no ?options"),
        ({}, "holds a password in clear"),  # b_database's: Connect would store it
    ],
)
def test_create_refuses_a_bad_request_before_connecting_anywhere(
    change: dict[str, Any], words: str
) -> None:
    response = client(FakeControl()).post("/v1/pairs", json=PAIR | change, headers=auth())
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error_code"] == "pair_refused"
    assert words in body["message"]
    assert "\n" not in body["message"]
    assert "SECRET" not in body["message"] and ":pw@" not in body["message"]


def test_pair_mutations_need_the_token_and_reads_do_not() -> None:
    api = client(FakeControl())
    assert api.post("/v1/pairs", json=PAIR).status_code == 401
    assert api.delete("/v1/pairs/shop").status_code == 401
    missing = api.get("/v1/pairs/shop")
    assert (missing.status_code, missing.json()["error_code"]) == (404, "pair_not_found")
    assert "shop-a-to-b nor shop-b-to-a" in missing.json()["message"]
    gone = api.delete("/v1/pairs/shop", headers=auth())
    assert (gone.status_code, gone.json()["error_code"]) == (404, "pair_not_found")


def test_an_unknown_field_is_an_invalid_request() -> None:
    response = client(FakeControl()).post(
        "/v1/pairs", json=PAIR | {"tabels": ["x"]}, headers=auth()
    )
    assert (response.status_code, response.json()["error_code"]) == (400, "invalid_request")


def test_the_pairs_feeds_through_the_coordinator_and_back_into_a_plan() -> None:
    control = FakeControl()
    feeds = CoordinatorFeeds(control)
    plan = shop_plan()
    for side in (plan.a, plan.b):
        assert feeds.put_feed(plan.feed_body(side)) == "created"
        assert feeds.put_feed(plan.feed_body(side)) == "unchanged"  # idempotent
    stored = {name: feeds.feed(name) for name in ("shop-a-to-b", "shop-b-to-a")}
    # Inside, the sink URI keeps its password: the pair connects with it.
    assert stored["shop-a-to-b"]["feed"]["sink_uri"] == PAIR["b_database"] + "?schema=public"  # type: ignore[index]
    again = ops.plan_from_feeds("shop", stored, "http://ca:8083", "http://cb:8083")
    assert again == PairPlan(
        "shop",
        Side("a", PAIR["a_database"], "dc-a", "http://ca:8083"),
        Side("b", PAIR["b_database"], "dc-b", "http://cb:8083"),
        "public",
        ("accounts", "orders"),
        ("accounts.balance",),
    )
    # Through the API, as any feed, with its password masked.
    listed = client(control).get("/v1/changefeeds").json()
    assert sorted(f["name"] for f in listed) == ["shop-a-to-b", "shop-b-to-a"]
    assert all("SECRET" not in f["sink_uri"] for f in listed)
    assert parse_feed(plan.feed_body(plan.a), "t").config.active_active_side == "dc-a"
    feeds.remove_feed("shop-a-to-b")
    assert feeds.feed("shop-a-to-b") is None
    one_left = {name: feeds.feed(name) for name in ("shop-a-to-b", "shop-b-to-a")}
    half = ops.plan_from_feeds("shop", one_left, "", "")
    assert half is not None and half.a.database == PAIR["a_database"] and half.b.database == ""
    assert (half.a.cluster, half.b.cluster) == ("dc-a", "dc-b")


def test_status_names_the_pair_of_each_direction() -> None:
    control = FakeControl()
    feeds = CoordinatorFeeds(control)
    plan = shop_plan()
    feeds.put_feed(plan.feed_body(plan.a))
    api = client(control)
    assert api.post(
        "/v1/changefeeds",
        json={"name": "orders", "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["o"]},
        headers=auth(),
    ).is_success
    assert {f["name"]: f["pair"] for f in api.get("/v1/status").json()} == {
        "orders": None,
        "shop-a-to-b": "shop",
    }
