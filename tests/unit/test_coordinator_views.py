"""The feed status view's ordered-feed parts, from heartbeats (pure)."""

from __future__ import annotations

import pytest

from services.coordinator.members import Member
from services.coordinator.views import held_back

pytestmark = pytest.mark.unit


def _sorter(instance: str, checkpoints: dict[str, int]) -> Member:
    return Member(
        instance_id=instance,
        role="sorter",
        host="h",
        pid=1,
        version="0",
        started_at_ms=0,
        sent_at_ms=0,
        tasks=(),
        feeds=("f",),
        state="running",
        address="",
        checkpoints=checkpoints,
        last_error="",
    )


def test_partitions_holding_the_feed_back_come_from_the_sorters_heartbeats() -> None:
    one = _sorter("s1", {"bank/0": 5, "laggard:bank/3": 7_000_000, "laggard:bank/1": 9_000_000})
    # A second sorter (a restart overlapping the old heartbeat) saw bank/3 stop earlier.
    two = _sorter("s2", {"laggard:bank/3": 6_000_000})
    got = held_back([one, two])
    assert [(h.partition, h.since_ms) for h in got] == [("bank/3", 6_000), ("bank/1", 9_000)]


def test_no_laggard_no_entry() -> None:
    assert held_back([_sorter("s1", {"bank/0": 5, "bank/1": 6})]) == []
    assert held_back([]) == []
