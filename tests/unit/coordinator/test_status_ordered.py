"""consistency_ts of ordered feeds: from the sinks' feed-wide checkpoint_ts (no Kafka)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from crossfeed.services.coordinator.records import FeedStatus
from crossfeed.services.coordinator.status import next_status
from tests.unit.coordinator.test_lifecycle import member

pytestmark = pytest.mark.unit


def status(previous: FeedStatus, instances, ordered: bool = True) -> FeedStatus:
    return next_status(
        previous,
        instances,
        now_ms=5000,
        epoch=3,
        error_age_ms=0,
        stuck_after_ms=60_000,
        ordered=ordered,
    )


def sink(instance: str, checkpoint: int):
    return replace(member(instance, "sink"), checkpoint_ts_us=checkpoint)


def test_checkpoint_is_the_newest_sink_report_and_consistency_never_goes_back() -> None:
    pullers = [member("p1", "puller", {"t/0": 900, "t/1": 950})]
    first = status(FeedStatus("orders", "normal"), [*pullers, sink("s1", 800), sink("s2", 0)])
    assert (first.resolved_ts_us, first.checkpoint_ts_us, first.consistency_ts_us) == (
        900,
        800,
        800,
    )
    # A previous owner of the sorted partition may still report an older value.
    second = status(first, [sink("s1", 700), sink("s2", 850)])
    assert (second.checkpoint_ts_us, second.consistency_ts_us) == (850, 850)
    third = status(second, [sink("s2", 600)])  # restarted behind: consistency stays
    assert (third.checkpoint_ts_us, third.consistency_ts_us) == (600, 850)


def test_published_without_pullers_and_kept_without_sinks() -> None:
    first = status(FeedStatus("orders", "normal"), [sink("s1", 42)])
    assert first.consistency_ts_us == 42
    kept = status(first, [])
    assert (kept.checkpoint_ts_us, kept.consistency_ts_us) == (42, 42)


def test_mirror_feeds_ignore_the_field() -> None:
    out = status(FeedStatus("orders", "normal"), [sink("s1", 42)], ordered=False)
    assert out.consistency_ts_us == 0
