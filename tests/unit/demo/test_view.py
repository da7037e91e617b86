"""The demo's live view shows the feed as the coordinator's REST API reports it, keeps
to one frame on a terminal, and says what the failover did to each consumer group."""

from __future__ import annotations

import io
import logging
import time
from typing import Any

import pytest
from rich.console import Console

from crossfeed import log as logsetup
from crossfeed.demo import display
from crossfeed.demo.scenario import Demo, Names, _rpo_line
from crossfeed.services.coordinator.failover.models import GroupOut, PartitionOut
from crossfeed.services.coordinator.views import FeedStatusInfo
from tests.support.terminal import screen

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


def _group(name: str, exact: bool) -> dict[str, Any]:
    partition = PartitionOut(
        topic="orders",
        partition=0,
        source_offset=120,
        target_topic="orders",
        target_partition=0,
        target_offset=118,
        exact=exact,
        method="offset-sync" if exact else "timestamp",
        gap=0,
        consumer_timestamp_ms=NOW_US // 1000,
    )
    return GroupOut(
        feed="orders",
        group=name,
        source_reachable=False,
        translated=True,
        active_members=None,
        partitions=[partition],
    ).model_dump(mode="json")


def test_the_failover_line_says_what_happened_to_each_group() -> None:
    report = {
        "target": "dc-b",
        "unreplicated_records": 0,
        "rpo_seconds": 0.0,
        "moved": {"late": 1},
        "active": ["busy"],
        "groups": [_group(g, e) for g, e in [("kept", True), ("late", True), ("busy", True)]]
        + [_group("vague", False)],
    }
    line = _rpo_line(report)
    assert line.startswith("0 records never reached dc-b (RPO 0.0 s); ")
    assert "group kept already at its translated offsets on dc-b (kept there as it committed)" in (
        line
    )
    assert "group late moved to dc-b (1 partition(s))" in line
    assert "group busy has live members on dc-b: left alone" in line
    assert "group vague: nothing exact to move on 1 partition(s)" in line
    assert "none" not in line
    assert _rpo_line({"target": "dc-b", "moved": {}, "groups": []}).endswith(
        "no consumer group to move"
    )


def test_the_live_table_leaves_no_stale_frame_when_a_log_line_interrupts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A log line written while the table is live goes above it, and the table is on the
    screen once: before, the handler wrote to the stderr it was made with, pushing the
    table up and leaving its first frame behind as a stray header."""
    out = io.StringIO()
    view = display.Display(tty=True)
    view.console = Console(file=out, force_terminal=True, width=100, height=40)
    view.tty = True
    logsetup.setup("WARNING")
    try:
        view.progress({"produced": 1, "consumed": 0})
        logging.getLogger("crossfeed.test").warning("dc-a does not answer")
        view.say("losing dc-a: killing its broker")
        view.progress({"produced": 2, "consumed": 1})
    finally:
        view.close()
        logsetup.setup("INFO")
    lines = screen(out.getvalue())
    assert sum("crossfeed demo: dc-a -> dc-b" in line for line in lines) == 1
    assert sum("produced on dc-a" in line for line in lines) == 1
    warned = next(i for i, line in enumerate(lines) if "dc-a does not answer" in line)
    said = lines.index("losing dc-a: killing its broker")
    title = next(i for i, line in enumerate(lines) if "crossfeed demo" in line)
    assert warned < said < title
    assert any(line.startswith("│ 2 ") for line in lines)


def test_without_a_terminal_each_update_is_one_line_whatever_its_width() -> None:
    """Written to a file or a log, a progress update is one record: never wrapped at the
    console's width."""
    view = display.Display(tty=False, view="cdc")
    out = io.StringIO()
    view.console = Console(file=out, width=80)
    view.progress(
        {
            "elapsed": 12.0,
            "feed": _status("demo-cdc", "normal", 0.5, NOW_US),
            "source": (100, 20_000),
            "target": (100, 19_990),
            "samples": 10,
            "torn": 0,
        }
    )
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and len(lines[0]) > 80, lines
