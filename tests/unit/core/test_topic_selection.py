"""Unit and property tests for crossfeed.core.topic_selection."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from crossfeed.core.topic_selection import (
    TopicSelector,
    is_legal_topic_name,
    rename,
    topic_name_error,
    validate_rename_format,
)

pytestmark = pytest.mark.unit

legal_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABC0123456789._-", min_size=1, max_size=40
)
user_topics = legal_names.filter(lambda t: not t.startswith(("_crossfeed.", "__")))
user_topics = user_topics.filter(lambda t: t not in (".", ".."))


class TestSelects:
    def test_literal_name(self) -> None:
        selector = TopicSelector(["orders"])
        assert selector.selects("orders")
        assert not selector.selects("orders2")
        assert not selector.selects("xorders")

    def test_literal_with_dot_matches_only_itself(self) -> None:
        selector = TopicSelector(["orders.v1"])
        assert selector.selects("orders.v1")
        assert not selector.selects("ordersXv1")

    def test_regex_must_match_whole_name(self) -> None:
        selector = TopicSelector([r"orders\..*"])
        assert selector.selects("orders.eu")
        assert not selector.selects("my-orders.eu")
        assert not TopicSelector(["ord[a-z]+"]).selects("orders-x")  # re.match would accept

    def test_alternation(self) -> None:
        selector = TopicSelector(["(payments|orders)-events"])
        assert selector.select(["payments-events", "orders-events", "users-events"]) == [
            "orders-events",
            "payments-events",
        ]

    def test_exclusions_win(self) -> None:
        selector = TopicSelector([".*"], [r".*\.tmp", "audit"])
        assert selector.selects("orders")
        assert not selector.selects("orders.tmp")
        assert not selector.selects("audit")

    @pytest.mark.parametrize(
        "topic",
        [
            "_crossfeed.offset-syncs",
            "_crossfeed.f.changes",
            "__consumer_offsets",
            "__consumer_timestamps",
        ],
    )
    def test_internal_topics_never_selected(self, topic: str) -> None:
        assert not TopicSelector([".*", topic]).selects(topic)

    def test_single_underscore_topic_is_a_user_topic(self) -> None:
        assert TopicSelector([".*"]).selects("_schemas")

    def test_empty_include_selects_nothing(self) -> None:
        assert not TopicSelector([]).selects("orders")

    @pytest.mark.parametrize("bad", ["orders[", "(unclosed", "*x"])
    def test_invalid_regex_names_pattern_and_error(self, bad: str) -> None:
        with pytest.raises(ValueError) as info:
            TopicSelector([bad])
        message = str(info.value)
        assert repr(bad) in message and "invalid include pattern" in message
        with pytest.raises(re.error):
            re.compile(bad)

    def test_invalid_exclude_regex(self) -> None:
        with pytest.raises(ValueError, match=r"invalid exclude pattern 'a\('"):
            TopicSelector([".*"], ["a("])

    def test_empty_pattern_refused(self) -> None:
        with pytest.raises(ValueError, match="empty include pattern"):
            TopicSelector([""])

    def test_repr(self) -> None:
        assert repr(TopicSelector(["a"], ["b"])) == "TopicSelector(include=['a'], exclude=['b'])"


class TestPlan:
    def test_new_selected_topics_sorted_without_duplicates(self) -> None:
        selector = TopicSelector(["orders.*"], ["orders-old"])
        plan = selector.plan_new_topics(
            ["orders-b", "orders-a", "orders-a", "orders-old", "users", "orders-c"],
            already_known={"orders-c"},
        )
        assert plan == ["orders-a", "orders-b"]

    def test_nothing_new(self) -> None:
        assert TopicSelector(["a"]).plan_new_topics(["a"], ["a"]) == []


class TestTopicNames:
    @pytest.mark.parametrize("name", ["a", "orders.v1", "A_b-9", "x" * 249])
    def test_legal(self, name: str) -> None:
        assert is_legal_topic_name(name)
        assert topic_name_error(name) is None

    @pytest.mark.parametrize(
        ("name", "why"),
        [
            ("", "empty"),
            (".", "not allowed"),
            ("..", "not allowed"),
            ("x" * 250, "250 characters long"),
            ("a/b", "'/'"),
            ("a b", "' '"),
            ("é", "'é'"),
        ],
    )
    def test_illegal(self, name: str, why: str) -> None:
        error = topic_name_error(name)
        assert error is not None and why in error
        assert not is_legal_topic_name(name)


class TestRename:
    def test_identity_default(self) -> None:
        assert rename("orders") == "orders"

    def test_prefix_and_suffix(self) -> None:
        assert rename("orders", "dc-a.${topic}.replica") == "dc-a.orders.replica"

    def test_placeholder_twice(self) -> None:
        assert rename("x", "${topic}-${topic}") == "x-x"

    def test_unknown_placeholder(self) -> None:
        with pytest.raises(ValueError, match=r"unknown placeholder '\$\{cluster\}'"):
            rename("orders", "${cluster}.${topic}")

    def test_illegal_result(self) -> None:
        with pytest.raises(ValueError, match="illegal topic name for 'orders'"):
            rename("orders", "dc a/${topic}")

    def test_too_long_result(self) -> None:
        with pytest.raises(ValueError, match="maximum is 249"):
            rename("x" * 249, "a.${topic}")

    @pytest.mark.parametrize("fmt", ["_crossfeed.${topic}", "__${topic}"])
    def test_internal_result_refused(self, fmt: str) -> None:
        with pytest.raises(ValueError, match="internal topic name"):
            rename("orders", fmt)

    def test_validate_rename_format(self) -> None:
        validate_rename_format("${topic}")
        validate_rename_format("dc-a.${topic}")
        with pytest.raises(ValueError, match=r"must contain \$\{topic\}"):
            validate_rename_format("fixed")
        with pytest.raises(ValueError, match="illegal"):
            validate_rename_format("${topic}!")


@given(user_topics)
def test_literal_include_selects_exactly_itself(topic: str) -> None:
    selector = TopicSelector([topic])
    assert selector.selects(topic)
    assert not selector.selects(topic + "x")


@given(user_topics, st.lists(user_topics, max_size=5), st.lists(user_topics, max_size=5))
def test_exclusion_always_wins(topic: str, include: list[str], exclude: list[str]) -> None:
    selector = TopicSelector([*include, ".*"], [*exclude, topic])
    assert not selector.selects(topic)


@given(user_topics)
def test_identity_rename(topic: str) -> None:
    assert rename(topic) == topic


@given(user_topics, user_topics)
def test_rename_is_injective_with_placeholder(a: str, b: str) -> None:
    assume(a != b)
    assume(len(a) <= 240 and len(b) <= 240)
    assert rename(a, "dc-a.${topic}") != rename(b, "dc-a.${topic}")


@given(st.text(max_size=12), st.text(max_size=12))
def test_rename_result_is_always_legal_or_refused(prefix: str, topic: str) -> None:
    try:
        result = rename(topic, prefix + "${topic}")
    except ValueError:
        return
    assert is_legal_topic_name(result)
    assert not result.startswith(("__", "_crossfeed."))
