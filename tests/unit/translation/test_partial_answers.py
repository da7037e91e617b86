"""A source that answers for some groups and not others (a coordinator partition still
loading, one request timed out on a busy broker) must not hide the groups that answered."""

from __future__ import annotations

from typing import Any

import pytest

from crossfeed.translation import kafka_io
from crossfeed.translation.kafka_io import PartlyAnswered, Unreachable
from crossfeed.translation.source import SourceView


class Answers:
    """What the stand-in admin calls answer: groups listed, and offsets per group (an
    exception instead of offsets: that group's request failed)."""

    def __init__(self, offsets: dict[str, Any]) -> None:
        self.offsets = offsets

    def list_groups(self, _admin: Any, _timeout_s: float = 0) -> list[str]:
        return sorted(self.offsets)

    def group_offsets(self, _admin: Any, groups: list[str]) -> dict[str, Any]:
        answered = {g: self.offsets[g] for g in groups if isinstance(self.offsets[g], dict)}
        if len(answered) == len(groups):
            return answered
        if not answered:
            raise Unreachable("offsets of every group: timed out")
        raise PartlyAnswered("offsets of group 'slow': timed out", answered)


@pytest.fixture
def view(monkeypatch: pytest.MonkeyPatch) -> tuple[SourceView, Answers]:
    answers = Answers({})
    monkeypatch.setattr(kafka_io, "list_groups", answers.list_groups)
    monkeypatch.setattr(kafka_io, "group_offsets", answers.group_offsets)
    conf = {"bootstrap.servers": "127.0.0.1:1"}
    v = SourceView("f", "dc-a", conf, lambda g: g != "ignored", lambda t: t == "orders")
    return v, answers


def test_a_group_that_did_not_answer_keeps_its_last_known_offsets(view) -> None:
    v, answers = view
    answers.offsets = {"fast": {("orders", 0): 5}, "slow": {("orders", 0): 7}}
    v._list_positions(1000)
    answers.offsets = {"fast": {("orders", 0): 9}, "slow": Unreachable("timed out")}
    v._list_positions(2000)
    assert {
        g: {tp: (k.offset, k.seen_at_ms) for tp, k in p.items()} for g, p in v.positions.items()
    } == {
        "fast": {("orders", 0): (9, 2000)},
        "slow": {("orders", 0): (7, 1000)},
    }


def test_groups_that_answered_are_known_even_if_others_never_did(view) -> None:
    v, answers = view
    answers.offsets = {
        "new": {("orders", 1): 3, ("other", 0): 4},
        "slow": Unreachable("timed out"),
        "ignored": {("orders", 0): 1},
    }
    v._list_positions(1000)
    assert {g: sorted(p) for g, p in v.positions.items()} == {"new": [("orders", 1)]}


def test_a_group_gone_from_the_source_or_without_wanted_offsets_is_forgotten(view) -> None:
    v, answers = view
    answers.offsets = {"a": {("orders", 0): 1}, "b": {("orders", 0): 2}}
    v._list_positions(1000)
    answers.offsets = {"b": {("other", 0): 2}}
    v._list_positions(2000)
    assert v.positions == {}


def test_no_group_answering_is_a_lost_source(view) -> None:
    v, answers = view
    answers.offsets = {"a": Unreachable("timed out")}
    with pytest.raises(Unreachable) as raised:
        v._list_positions(1000)
    assert type(raised.value) is Unreachable


def test_partly_answered_survives_detaching_with_its_answers() -> None:
    err = PartlyAnswered("offsets of group 'slow': timed out", {"fast": {("t", 0): 1}})
    detached = err.detached()
    assert isinstance(detached, PartlyAnswered) and detached.answered == err.answered
    assert str(detached) == str(err) and detached.__traceback__ is None
    assert type(Unreachable("x").detached()) is Unreachable
