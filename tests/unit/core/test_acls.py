"""Unit and property tests for crossfeed.core.acls."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.acls import TopicAcl, for_targets, missing

pytestmark = pytest.mark.unit

TARGETS = {"orders": "dc-a.orders", "orders.eu": "dc-a.orders.eu", "pay": "dc-a.pay"}


def acl(
    operation: str, topic: str, pattern: str = "LITERAL", permission: str = "ALLOW"
) -> TopicAcl:
    return TopicAcl("User:app", "*", operation, permission, pattern, topic)


def test_read_and_describe_are_copied_renamed_write_never() -> None:
    got = for_targets(
        [acl("READ", "orders"), acl("DESCRIBE", "pay", permission="DENY"), acl("WRITE", "orders")],
        TARGETS,
    )
    assert got == {acl("READ", "dc-a.orders"), acl("DESCRIBE", "dc-a.pay", permission="DENY")}


def test_all_grants_what_a_consumer_needs_and_not_more() -> None:
    assert for_targets([acl("ALL", "orders")], TARGETS) == {
        acl("READ", "dc-a.orders"),
        acl("DESCRIBE", "dc-a.orders"),
    }


def test_prefixes_and_the_wildcard_become_one_rule_per_copied_topic() -> None:
    assert for_targets([acl("READ", "orders", "PREFIXED")], TARGETS) == {
        acl("READ", "dc-a.orders"),
        acl("READ", "dc-a.orders.eu"),
    }
    assert {r.topic for r in for_targets([acl("READ", "*")], TARGETS)} == set(TARGETS.values())


def test_topics_the_feed_does_not_copy_get_nothing() -> None:
    assert for_targets([acl("READ", "other"), acl("READ", "x", "PREFIXED")], TARGETS) == set()


def test_missing_only_adds() -> None:
    wanted = {acl("READ", "dc-a.orders"), acl("READ", "dc-a.pay")}
    existing = [acl("READ", "dc-a.orders"), acl("WRITE", "dc-a.pay")]
    assert missing(wanted, existing) == [acl("READ", "dc-a.pay")]


operations = st.sampled_from(["READ", "WRITE", "DESCRIBE", "ALL", "ALTER", "DELETE"])
patterns = st.sampled_from(["LITERAL", "PREFIXED"])
names = st.sampled_from(["orders", "orders.eu", "pay", "o", "*", "other"])
rules = st.builds(
    TopicAcl,
    st.sampled_from(["User:a", "User:b"]),
    st.just("*"),
    operations,
    st.sampled_from(["ALLOW", "DENY"]),
    patterns,
    names,
)


@given(st.lists(rules, max_size=12))
def test_every_rule_is_literal_read_or_describe_on_a_target_topic(source: list[TopicAcl]) -> None:
    got = for_targets(source, TARGETS)
    for rule in got:
        assert rule.pattern == "LITERAL" and rule.topic in TARGETS.values()
        assert rule.operation in ("READ", "DESCRIBE")
    assert missing(got, got) == []
