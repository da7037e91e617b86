"""The failover routes over fake hooks, and the CLI's rendering of their answers."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi import Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import RedirectResponse, Response
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY
from rich.console import Console

from crossfeed.cli.translation_render import (
    deleted_lines,
    failback_outcome,
    failback_report,
    failover_report,
    group_table,
    group_verdict,
)
from crossfeed.config import Settings
from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.error_handlers import install_error_handlers
from crossfeed.services.coordinator.failover import FailoverHooks, make_router
from crossfeed.services.coordinator.failover.reverse import reverse_name, reverse_spec
from crossfeed.translation.translator import GroupTranslation, PartitionTranslation

pytestmark = pytest.mark.unit

FEED = {"name": "orders", "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["o.*"]}
SETTINGS = Settings(
    clusters={
        "dc-a": {"bootstrap.servers": "127.0.0.1:1"},
        "dc-b": {"bootstrap.servers": "127.0.0.1:2"},
    }
)


class FakeTranslator:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def translate_group(self, group: str) -> GroupTranslation:
        self.asked.append(group)
        row = PartitionTranslation(
            group, "orders", 0, 10, "orders", 0, 12, True, "offset-sync", 0, -1, 1
        )
        lagging = PartitionTranslation(
            group, "orders", 1, 50, "orders", 1, 40, False, "frontier", 7, -1, 1
        )
        return GroupTranslation("orders", group, True, True, 0, [row, lagging])


def _client(**hooks: Any) -> TestClient:
    app = FastAPI()
    install_error_handlers(app)  # as in the coordinator's app
    app.include_router(make_router(FailoverHooks(SETTINGS, **hooks)))
    return TestClient(app)


def test_translate_uses_the_running_translator_and_group_ids_may_hold_slashes() -> None:
    translator = FakeTranslator()
    spec = FeedSpec.model_validate(FEED)
    client = _client(
        find_feed=lambda name: spec if name == "orders" else None,
        translator=lambda name: translator,
    )
    answer = client.get("/v1/groups/team%2Fbilling/translate", params={"feed": "orders"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert translator.asked == ["team/billing"]
    assert [
        (p["partition"], p["target_offset"], p["exact"], p["gap"]) for p in body["partitions"]
    ] == [
        (0, 12, True, 0),
        (1, 40, False, 7),
    ]


def test_unknown_feeds_and_bad_specs_are_refused_with_what_to_do() -> None:
    client = _client()
    missing = client.get("/v1/groups/g/translate", params={"feed": "nope"})
    assert missing.status_code == 404 and "--feed-file" in missing.json()["message"]
    assert missing.json()["error_code"] == "feed_not_found"
    other = client.post("/v1/groups/g/translate", json={"feed": "x", "feed_spec": FEED})
    assert other.status_code == 400 and "names feed 'orders'" in other.json()["message"]
    assert other.json()["error_code"] == "name_mismatch"
    bad = client.post(
        "/v1/groups/g/translate", json={"feed": "orders", "feed_spec": {**FEED, "topics": []}}
    )
    assert bad.status_code == 400 and "topics" in bad.json()["message"]
    ordered = {**FEED, "mode": "ordered", "sink-uri": "kafka://dc-b/all"}
    no_topic = {**ordered, "sink-uri": "kafka://dc-b"}
    labels = {"operation": "failover", "outcome": "refused"}
    runs = "crossfeed_coordinator_failover_duration_seconds_count"
    before = REGISTRY.get_sample_value(runs, labels) or 0.0
    refused = client.post("/v1/failover", json={"feed": "orders", "feed_spec": no_topic})
    assert REGISTRY.get_sample_value(runs, labels) == before + 1  # timed, as refused
    assert refused.status_code == 400 and "names its target topic" in refused.json()["message"]
    body = {"feed": "orders", "feed_spec": ordered}
    translated = client.post("/v1/groups/g/translate", json=body)
    assert translated.status_code == 400 and "not a mirror feed" in translated.json()["message"]


def test_mutations_go_to_the_leader_and_need_the_token() -> None:
    def token(authorization: str | None = Header(None)) -> None:
        if authorization != "Bearer t":
            raise HTTPException(401, "token")

    def elsewhere(request: Request) -> Response | None:
        return RedirectResponse(f"http://leader:8300{request.url.path}", status_code=307)

    client = _client(leader_only=elsewhere, dependencies=[Depends(token)])
    assert client.post("/v1/failover", json={"feed": "orders"}).status_code == 401
    moved = client.post(
        "/v1/failback",
        json={"feed": "orders"},
        headers={"Authorization": "Bearer t"},
        follow_redirects=False,
    )
    assert moved.status_code == 307 and moved.headers["location"].endswith("/v1/failback")


def test_reverse_feed_swaps_source_and_target() -> None:
    spec = FeedSpec.model_validate({**FEED, "config": {"staging.partitions": 3}})
    reverse = reverse_spec(spec, reverse_name("orders"))
    assert (reverse.name, reverse.source, reverse.sink_uri) == (
        "orders-reverse",
        "dc-b",
        "kafka://dc-a",
    )
    assert reverse.topics == ["o.*"] and reverse.config.staging_partitions == 3
    assert len(reverse_name("x" * 63)) == 63
    renaming = FeedSpec.model_validate({**FEED, "rename-format": "a.${topic}"})
    with pytest.raises(HTTPException, match="renames"):
        reverse_spec(renaming, "r")


def _text(parts: Any) -> str:
    console = Console(record=True, width=200)
    for part in parts:
        console.print(part)
    return console.export_text()


def test_rendering() -> None:
    partition = {
        "topic": "orders",
        "partition": 1,
        "source_offset": 50,
        "target_topic": "orders",
        "target_partition": 1,
        "target_offset": 40,
        "exact": False,
        "method": "frontier",
        "gap": 7,
        "consumer_timestamp_ms": -1,
    }
    stale = {
        **partition,
        "partition": 2,
        "exact": True,
        "method": "offset-sync",
        "gap": 0,
        "position": {
            "last_commit": False,
            "known_from": "commit-log",
            "known_until_ms": 1000,
            "commit_age_s": 0.25,
            "reread_max": 12,
        },
    }
    group = {
        "feed": "orders",
        "group": "billing",
        "source_reachable": False,
        "translated": True,
        "active_members": 0,
        "partitions": [partition, stale],
    }
    table = _text([group_table(group)])
    assert "no (frontier)" in table and "<= 12 (last known commit 0.2s old)" in table
    row = {
        "topic": "orders",
        "partition": 1,
        "source_end": 60,
        "replicated_to": 43,
        "target_frontier": 40,
        "unreplicated": 17,
        "counted": True,
        "rpo_seconds": 2.5,
        "known_at_ms": 1,
    }
    report = {
        "feed": "orders",
        "source": "dc-a",
        "target": "dc-b",
        "stopped_by": "coordinator",
        "source_reachable": False,
        "groups": [group],
        "moved": {"billing": 1},
        "active": [],
        "partitions": [row],
        "unreplicated_records": 17,
        "rpo_seconds": 2.5,
        "positions_at_last_commit": 0,
        "positions_stale": 1,
        "reread_max_records": 12,
        "notes": ["dc-a does not answer"],
    }
    text = _text(failover_report(report))
    assert "RPO: 17 record(s), 2.5s" in text
    assert "group billing: moved to dc-b, 1 partition(s) at the offsets above" in text
    assert "if it committed after that on dc-a, it reads at most 12 record(s) again" in text
    assert "1 at the last commit seen before dc-a was lost" in text
    assert (
        text.rstrip()
        .splitlines()[-1]
        .startswith(
            "failover of orders done: dc-a -> dc-b stopped; group(s) billing resume on dc-b"
        )
    )
    back = {
        "feed": "orders",
        "old_primary": "dc-a",
        "standby": "dc-b",
        "extra": [
            {
                "topic": "orders",
                "partition": 1,
                "replicated_to": 43,
                "end": 60,
                "extra": 17,
                "counted": True,
                "replayed": 17,
            }
        ],
        "extra_records": 17,
        "replayed_records": 17,
        "reverse": {
            "name": "orders-reverse",
            "action": "start-it",
            "spec": {},
            "positions_seeded": True,
            "lag": [],
            "caught_up": False,
        },
        "groups": [],
        "moved": {},
        "active": [],
        "waiting": ["billing"],
        "notes": [],
    }
    text = _text(failback_report(back))
    assert "17 extra record(s), 17 replayed" in text and "to be started" in text
    last = " ".join(text[text.index("failback of orders not finished") :].split())
    assert "failback of orders not finished" in last and "billing still on dc-b" in last
    assert "next: 'crossfeed puller run --feed orders-reverse' then 'crossfeed failback" in last


def _row(exact: bool, last_commit: bool, reread: int = 0) -> dict[str, Any]:
    return {
        "topic": "orders.eu",
        "partition": 0,
        "source_offset": 50,
        "target_topic": "orders.eu",
        "target_partition": 0,
        "target_offset": 50 if exact else None,
        "exact": exact,
        "method": "offset-sync" if exact else "none",
        "gap": 0,
        "consumer_timestamp_ms": -1,
        "position": {
            "last_commit": last_commit,
            "known_from": "commit-log",
            "known_until_ms": 1000,
            "commit_age_s": 30.0,
            "reread_max": reread,
        },
    }


def _group(*rows: dict[str, Any]) -> dict[str, Any]:
    return {
        "feed": "orders",
        "group": "billing",
        "source_reachable": False,
        "translated": True,
        "active_members": 0,
        "partitions": list(rows),
    }


def test_each_group_gets_one_verdict_that_matches_its_rows() -> None:
    exact = _group(_row(True, True), _row(True, True))
    # Kept on the target as it committed: not in this call's moves, all rows exact.
    text, _ = group_verdict(exact, {}, [], "dc-b", "dc-a")
    assert text == (
        "group billing: already at the offsets above on dc-b (moved as it committed); "
        "resumes at its last commit"
    )
    text, _ = group_verdict(exact, {"billing": 2}, [], "dc-b", "dc-a")
    assert text.startswith("group billing: moved to dc-b, 2 partition(s)")
    unknown = _group(_row(True, True), _row(False, False, -1))
    text, _ = group_verdict(unknown, {}, [], "dc-b", "dc-a")
    assert text.startswith("group billing: not moved: 1 partition(s) without an exact offset")
    assert group_verdict(exact, {}, ["billing"], "dc-b")[0].endswith("left alone")
    # A stale position with nothing after it: no bound to speak of.
    quiet = _group(_row(True, False, 0))
    assert "nothing after it to read again" in group_verdict(quiet, {}, [], "dc-b", "dc-a")[0]


def _deleted(held: bool) -> dict[str, Any]:
    line = "group billing: orders.eu/1: its position 120 is in offsets 120-149 (30 records) ..."
    deleted = {"first": 120, "last": 149, "count": 30, "held": held, "key": "orders.eu/1@120"}
    return {
        **_row(False, True),
        "partition": 1,
        "target_offset": 101,
        "method": "source-deleted",
        "deleted": {**deleted, "line": line},
    }


def test_a_group_in_deleted_records_gets_its_line_and_a_verdict_that_says_what_waits() -> None:
    moved = _group(_row(True, True), _deleted(held=False))
    assert [t.plain for t in deleted_lines(moved)] == [moved["partitions"][1]["deleted"]["line"]]
    text, _ = group_verdict(moved, {"billing": 2}, [], "dc-b", "dc-a")
    assert text.startswith("group billing: moved to dc-b, 2 partition(s) at the offsets above")
    assert "until acknowledged" not in text
    held = _group(_row(True, True), _deleted(held=True))
    text, style = group_verdict(held, {"billing": 1}, [], "dc-b", "dc-a")
    assert "1 partition(s) not moved until acknowledged (above)" in text and style == "yellow"
    text, _ = group_verdict(_group(_deleted(held=True)), {}, [], "dc-b", "dc-a")
    assert text == "group billing: not moved: every partition waits for its acknowledgment"
    assert not list(deleted_lines(_group(_row(True, True))))


def test_the_failback_outcome_says_what_moved_where_and_the_feeds_states() -> None:
    report = {
        "feed": "orders",
        "old_primary": "dc-a",
        "standby": "dc-b",
        "reverse": {
            "name": "orders-reverse",
            "action": "created",
            "caught_up": True,
            "removed": True,
            "unassigned_tasks": 0,
        },
        "moved": {"billing": 4},
        "groups": [],
        "active": [],
        "waiting": [],
        "complete": True,
        "forward_state": "normal",
    }
    assert failback_outcome(report) == (
        "failback of orders done: group(s) billing back on dc-a; orders replicates "
        "dc-a -> dc-b again (normal); reverse feed orders-reverse removed, its copy done"
    )
    kept = {**report, "reverse": {**report["reverse"], "removed": False}}
    assert failback_outcome(kept).endswith("orders-reverse keeps copying dc-b -> dc-a")
    # Moved as it committed (not by this call): back all the same, as its verdict says.
    there = {**report, "moved": {}, "groups": [_group(_row(True, True))]}
    assert failback_outcome(there).startswith(
        "failback of orders done: group(s) billing back on dc-a;"
    )
