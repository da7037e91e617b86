"""The demo's live view shows the feed as the coordinator's REST API reports it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from crossfeed.demo import display
from crossfeed.demo.scenario import Demo, Names
from crossfeed.services.coordinator.views import FeedStatusInfo

pytestmark = pytest.mark.unit

NOW_US = int(time.time() * 1e6)


def _status(name: str, state: str, lag_s: float | None, consistency_us: int) -> dict[str, Any]:
    """A feed's status exactly as GET /v1/status serializes it."""
    return FeedStatusInfo(
        name=name,
        state=state,
        last_error=None,
        tasks=[],
        generation=1,
        epoch=1,
        pullers=["p1"],
        sinks=["s1"],
        resolved_ts_us=consistency_us,
        checkpoint_ts_us=consistency_us,
        consistency_ts_us=consistency_us,
        lag_s=lag_s,
        updated_at_ms=NOW_US // 1000,
    ).model_dump(mode="json")


class FakeApi:
    def __init__(self, feeds: list[dict[str, Any]]) -> None:
        self.feeds = feeds

    def status(self) -> list[dict[str, Any]]:
        return self.feeds


def test_the_live_view_shows_state_lag_and_consistency_ts() -> None:
    shown: list[dict[str, Any]] = []
    names = Names()
    demo = Demo(progress=shown.append, names=names)
    other = _status("someone-else", "paused", None, 0)
    ours = _status(names.feed, "normal", 0.8, NOW_US - 800_000)
    demo._show(FakeApi([other, ours]), produced=10, consumed=5)  # type: ignore[arg-type]
    row = display._row(shown[-1])
    produced, consumed, state, lag, consistency = row
    assert (produced, consumed, state, lag) == ("10", "5", "normal", "0.8 s")
    assert consistency == time.strftime("%H:%M:%S", time.localtime((NOW_US - 800_000) / 1e6))


def test_the_live_view_says_error_when_the_feed_is_stuck() -> None:
    shown: list[dict[str, Any]] = []
    names = Names()
    demo = Demo(progress=shown.append, names=names)
    demo._show(FakeApi([_status(names.feed, "error", 42.0, NOW_US)]), produced=1, consumed=0)  # type: ignore[arg-type]
    assert display._row(shown[-1])[2:4] == ["error", "42.0 s"]
