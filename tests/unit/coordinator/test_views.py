"""The feed status view's ordered-feed parts, from heartbeats (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from crossfeed.services.coordinator.members import Member
from crossfeed.services.coordinator.views import held_back, idle_since

pytestmark = pytest.mark.unit


def _sorter(
    instance: str, laggards: dict[str, int], resolved: dict[str, int] | None = None
) -> Member:
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
        checkpoints={},
        last_error="",
        resolved=resolved or {},
        laggards=laggards,
    )


def test_partitions_holding_the_feed_back_come_from_the_sorters_heartbeats() -> None:
    one = _sorter("s1", {"bank/3": 7_000_000, "bank/1": 9_000_000}, {"bank/0": 5})
    # A second sorter (a restart overlapping the old heartbeat) saw bank/3 stop earlier.
    two = _sorter("s2", {"bank/3": 6_000_000})
    got = held_back([one, two])
    assert [(h.partition, h.since_ms) for h in got] == [("bank/3", 6_000), ("bank/1", 9_000)]


def test_a_quiet_source_is_idle_once_the_sinks_hold_its_last_resolved_point() -> None:
    quiet = replace(_sorter("s1", {"bank/3": 6_000_000}), idle_since_us=5_000)
    assert idle_since([quiet], checkpoint_ts_us=4_999) == 0  # the sink has not caught up
    assert idle_since([quiet], checkpoint_ts_us=5_000) == 5_000
    busy = _sorter("s2", {})  # an overlapping instance says changes wait
    assert idle_since([quiet, busy], checkpoint_ts_us=9_000) == 0
    assert idle_since([], checkpoint_ts_us=9_000) == 0  # no sorter: nothing is known


def test_no_laggard_no_entry() -> None:
    assert held_back([_sorter("s1", {}, {"bank/0": 5, "bank/1": 6})]) == []


def test_a_heartbeat_from_before_the_resolved_field_is_read_as_the_new_fields() -> None:
    """0.1.0 pullers and sorters put resolved_ts (and laggards as 'laggard:<p>') into
    checkpoints; a coordinator reading them during a rolling upgrade sees the same."""
    from crossfeed.services.coordinator.members import Member as M

    base = {
        "instance_id": "s",
        "host": "h",
        "pid": 1,
        "version": "0.1.0",
        "started_at_ms": 0,
        "sent_at_ms": 0,
        "tasks": [],
        "feeds": ["f"],
        "state": "running",
    }
    old = M.from_record(
        {**base, "role": "sorter", "checkpoints": {"bank/0": 5, "laggard:bank/3": 7_000_000}}
    )
    assert old.resolved == {"bank/0": 5} and old.laggards == {"bank/3": 7_000_000}
    assert old.checkpoints == {}
    sink = M.from_record({**base, "role": "sink", "checkpoints": {"bank/0": 4}})
    assert sink.checkpoints == {"bank/0": 4} and sink.resolved == {}
    assert held_back([]) == []
