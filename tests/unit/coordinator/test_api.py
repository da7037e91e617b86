"""The REST API over a fake coordinator: auth, routing to the leader, error bodies."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.api import make_app
from crossfeed.services.coordinator.errors import CODES
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.leadership import LeaderInfo
from crossfeed.services.coordinator.lifecycle import Action, NotLeaderNow, restartable, transition
from crossfeed.services.coordinator.members import Live, Member, MembersView
from crossfeed.services.coordinator.records import FeedStatus, StoredFeed
from crossfeed.services.coordinator.updates import check_update

pytestmark = pytest.mark.unit

TOKEN = "s3cret"
FEED = {"name": "orders", "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["o.*"]}


def coordinator(instance: str, address: str) -> Live:
    member = Member(instance, "coordinator", "h", 1, "0", 0, 0, (), (), "running", address, {}, "")
    return Live(member, 300)


class FakeControl:
    def __init__(self, leading: bool = True, holder: str | None = "c1") -> None:
        self.feeds: dict[str, StoredFeed] = {}
        self.statuses: dict[str, FeedStatus] = {}
        self.info = LeaderInfo("c1" if leading else "c2", leading, holder, 4, 1000)
        self.members = MembersView(
            {"c1": coordinator("c1", "leader.example:8300"), "c2": coordinator("c2", "b:8300")}
        )
        self.moved = False
        self.modes: dict[str, str] = {}
        self.translation: dict[str, list[str]] = {}

    def views(self) -> tuple[StateView, MembersView, int]:
        return StateView(feeds=self.feeds, statuses=self.statuses), self.members, 1_000_000

    def leader(self) -> LeaderInfo:
        return self.info

    def commit_modes(self) -> dict[str, str]:
        return dict(self.modes)

    def translation_notices(self) -> dict[str, list[str]]:
        return dict(self.translation)

    def create(self, spec: FeedSpec) -> None:
        if self.moved:
            raise NotLeaderNow()
        self.feeds[spec.name] = StoredFeed(spec, 1)
        self.statuses[spec.name] = FeedStatus(spec.name, "normal")

    def put(self, spec: FeedSpec) -> str:
        stored = self.feeds.get(spec.name)
        if stored is None or self.statuses[spec.name].state == "removed":
            self.create(spec)
            return "created"
        if not check_update(stored.spec, spec):
            return "unchanged"
        self.feeds[spec.name] = StoredFeed(spec, stored.created_at_ms)
        return "updated"

    def act(self, name: str, action: Action) -> None:
        state = self.statuses[name].state if name in self.statuses else None
        self.statuses[name] = FeedStatus(name, transition(name, state, action))  # type: ignore[arg-type]

    def restart(self, name: str, task: int | None) -> list[int]:
        state = self.statuses[name].state if name in self.statuses else None
        stored = self.feeds.get(name)
        return restartable(name, state, stored.spec if stored else None, task)


def client(control: FakeControl, token: str | None = TOKEN) -> TestClient:
    return TestClient(make_app(control, token), follow_redirects=False)


def auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_lifecycle_on_the_leader() -> None:
    api = client(FakeControl())
    created = api.post("/v1/changefeeds", json=FEED, headers=auth())
    assert created.status_code == 201, created.text
    assert created.json()["state"] == "normal"
    assert [f["name"] for f in api.get("/v1/changefeeds").json()] == ["orders"]
    detail = api.get("/v1/changefeeds/orders").json()
    assert detail["feed"]["sink_uri"] == "kafka://dc-b"
    assert len(detail["status"]["tasks"]) == 8
    assert api.post("/v1/changefeeds/orders/pause", headers=auth()).json()["state"] == "paused"
    assert api.post("/v1/changefeeds/orders/resume", headers=auth()).json()["state"] == "normal"
    assert api.delete("/v1/changefeeds/orders", headers=auth()).json()["state"] == "removed"
    assert api.get("/v1/changefeeds").json() == []
    assert [f["name"] for f in api.get("/v1/changefeeds?all=true").json()] == ["orders"]
    assert api.get("/v1/status").json() == []


def test_status_says_how_each_feed_gets_group_commits() -> None:
    control = FakeControl()
    api = client(control)
    assert api.post("/v1/changefeeds", json=FEED, headers=auth()).status_code == 201
    assert api.get("/v1/status").json()[0]["commits"] is None  # not translated here
    control.modes = {"orders": "poll (__consumer_offsets: Broker: Topic authorization failed)"}
    assert api.get("/v1/status").json()[0]["commits"] == control.modes["orders"]
    control.modes = {"orders": "stream"}
    assert api.get("/v1/changefeeds/orders").json()["status"]["commits"] == "stream"


def test_status_shows_the_translators_notices_beside_the_pullers() -> None:
    control = FakeControl()
    api = client(control)
    assert api.post("/v1/changefeeds", json=FEED, headers=auth()).status_code == 201
    assert api.get("/v1/status").json()[0]["notices"] == []
    line = "group billing: orders/0: its position 120 is in offsets 120-149 (30 records) ..."
    control.translation = {"orders": [line]}
    assert api.get("/v1/status").json()[0]["notices"] == [f"translation: {line}"]
    detail = api.get("/v1/changefeeds/orders").json()["status"]
    assert detail["notices"] == [f"translation: {line}"]


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "this coordinator requires an API token"),
        (auth("wrong"), "API token rejected"),
        ({"Authorization": "Basic abc"}, "API token rejected"),
    ],
)
def test_mutations_need_the_token(headers: dict[str, str], message: str) -> None:
    api = client(FakeControl())
    response = api.post("/v1/changefeeds", json=FEED, headers=headers)
    assert response.status_code == 401
    assert message in response.json()["message"]
    assert api.get("/v1/changefeeds").status_code == 200  # reads need none


def test_no_token_configured_means_open_mutations() -> None:
    api = client(FakeControl(), token=None)
    assert api.post("/v1/changefeeds", json=FEED).status_code == 201


def test_a_route_refuses_when_leadership_was_lost_after_the_forwarding_check() -> None:
    class LosesIt(FakeControl):
        def leader(self) -> LeaderInfo:  # leads when the middleware asks, then not
            info = self.info
            self.info = LeaderInfo("c1", False, "c2", 5, 1000)
            return info

    response = client(LosesIt()).post("/v1/changefeeds", json=FEED, headers=auth())
    assert (response.status_code, response.json()["error_code"]) == (503, "leader_moved")


def test_without_a_known_leader_mutations_get_503() -> None:
    api = client(FakeControl(leading=False, holder=None))
    response = api.post("/v1/changefeeds", json=FEED, headers=auth())
    assert response.status_code == 503
    assert "no coordinator leader is known" in response.json()["message"]


def test_leadership_moving_mid_request_is_503() -> None:
    control = FakeControl()
    control.moved = True
    response = client(control).post("/v1/changefeeds", json=FEED, headers=auth())
    assert response.status_code == 503
    assert "retry" in response.json()["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({**FEED, "name": "Bad Name"}, "feed name 'Bad Name' must be"),
        ({**FEED, "topics": ["("]}, "'('"),
        ({**FEED, "sink-uri": "ftp://x"}, "unknown scheme 'ftp'"),
        ({**FEED, "config": {"colour": "red"}}, "unknown option 'colour'"),
        ({**FEED, "mode": "fast"}, "mode: Input should be 'mirror' or 'ordered'"),
        ({k: v for k, v in FEED.items() if k != "source"}, "source is missing"),
        ([1, 2], "must be a JSON object"),
    ],
)
def test_bad_input_is_400_with_a_message(body: Any, message: str) -> None:
    response = client(FakeControl()).post("/v1/changefeeds", json=body, headers=auth())
    assert response.status_code == 400
    assert message in response.json()["message"]


def test_unknown_feed_is_404() -> None:
    api = client(FakeControl())
    assert api.get("/v1/changefeeds/nope").status_code == 404
    response = api.post("/v1/changefeeds/nope/pause", headers=auth())
    assert response.status_code == 404
    assert "no changefeed named 'nope'" in response.json()["message"]


def test_openapi_and_runtime_views_are_served() -> None:
    api = client(FakeControl())
    paths = api.get("/openapi.json").json()["paths"]
    for path in ("/v1/changefeeds", "/v1/status", "/v1/captures", "/v1/ha/status"):
        assert path in paths
    ha = api.get("/v1/ha/status").json()
    assert ha["role"] == "leader" and ha["leader_address"] == "leader.example:8300"
    assert [p["instance_id"] for p in ha["peers"]] == ["c2"]
    assert {c["instance_id"] for c in api.get("/v1/captures").json()} == {"c1", "c2"}
    assert "crossfeed_coordinator_role" in api.get("/metrics").text


def test_an_oversized_body_is_413_before_anything_is_stored() -> None:
    control = FakeControl()
    api = client(control)
    huge = {**FEED, "topics": ["t" * 1000] * 10_000}  # ~10 MB
    response = api.post("/v1/changefeeds", json=huge, headers=auth())
    assert response.status_code == 413, response.text
    assert "request body larger than" in response.json()["message"]

    def chunks():  # no Content-Length: refused once the limit is passed
        yield b'{"name": "orders", "topics": ["'
        for _ in range(300):
            yield b"x" * 1024
        yield b'"]}'

    chunked = api.post(
        "/v1/changefeeds",
        content=chunks(),
        headers={**auth(), "Content-Type": "application/json"},
    )
    assert chunked.status_code == 413, chunked.text
    assert control.feeds == {}  # nothing reached the state
    assert api.post("/v1/changefeeds", json=FEED, headers=auth()).status_code == 201


def test_put_creates_then_updates_and_is_idempotent() -> None:
    api = client(FakeControl())
    created = api.put("/v1/changefeeds/orders", json=FEED, headers=auth())
    assert created.status_code == 201, created.text
    assert created.headers["X-Crossfeed-Outcome"] == "created"
    again = api.put("/v1/changefeeds/orders", json=FEED, headers=auth())
    assert (again.status_code, again.headers["X-Crossfeed-Outcome"]) == (200, "unchanged")
    wider = {**FEED, "topics": ["o.*", "p.*"], "config": {"errors.tolerance": "none"}}
    updated = api.put("/v1/changefeeds/orders", json=wider, headers=auth())
    assert (updated.status_code, updated.headers["X-Crossfeed-Outcome"]) == (200, "updated")
    assert updated.json()["topics"] == ["o.*", "p.*"]
    assert updated.json()["config"] == {"errors.tolerance": "none"}
    assert api.get("/v1/changefeeds/orders").json()["feed"]["topics"] == ["o.*", "p.*"]


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "message"),
    [
        ("orders", {**FEED, "source": "dc-c"}, 409, "immutable_field", "source cannot change"),
        ("other", FEED, 400, "name_mismatch", "the body names feed 'orders' but the path 'other'"),
        ("orders", {**FEED, "topics": []}, 400, "invalid_request", "give at least one topic"),
    ],
)
def test_put_refusals(path: str, body: Any, status: int, code: str, message: str) -> None:
    api = client(FakeControl())
    assert api.put("/v1/changefeeds/orders", json=FEED, headers=auth()).status_code == 201
    response = api.put(f"/v1/changefeeds/{path}", json=body, headers=auth())
    assert response.status_code == status, response.text
    assert response.json()["error_code"] == code
    assert message in response.json()["message"]


def test_restart_a_feed_or_one_task() -> None:
    api = client(FakeControl())
    api.post("/v1/changefeeds", json={**FEED, "config": {"staging.partitions": 3}}, headers=auth())
    whole = api.post("/v1/changefeeds/orders/restart", headers=auth())
    assert whole.status_code == 200, whole.text
    assert whole.json() == {"feed": "orders", "tasks": ["orders/0", "orders/1", "orders/2"]}
    one = api.post("/v1/changefeeds/orders/tasks/2/restart", headers=auth())
    assert one.json()["tasks"] == ["orders/2"]
    beyond = api.post("/v1/changefeeds/orders/tasks/3/restart", headers=auth())
    assert (beyond.status_code, beyond.json()["error_code"]) == (404, "task_not_found")
    api.post("/v1/changefeeds/orders/pause", headers=auth())
    paused = api.post("/v1/changefeeds/orders/restart", headers=auth())
    assert (paused.status_code, paused.json()["error_code"]) == (409, "invalid_state")
    assert api.post("/v1/changefeeds/orders/restart").status_code == 401  # token needed


def test_every_refusal_has_a_stable_code_and_a_message() -> None:
    control = FakeControl()
    api = client(control)
    api.post("/v1/changefeeds", json=FEED, headers=auth())
    cases: list[tuple[Any, int, str | None]] = [
        (api.post("/v1/changefeeds/orders/resume", headers=auth()), 200, None),
        (api.get("/v1/changefeeds/nope"), 404, "feed_not_found"),
        (api.post("/v1/changefeeds", json=FEED), 401, "token_required"),
        (api.post("/v1/changefeeds", json=FEED, headers=auth("x")), 401, "token_rejected"),
        (api.post("/v1/changefeeds", json=[1], headers=auth()), 400, "invalid_request"),
        (api.get("/v1/nothing-here"), 404, "not_found"),
        (api.patch("/v1/changefeeds/orders", headers=auth()), 405, "method_not_allowed"),
        (
            api.post("/v1/changefeeds/orders/tasks/x/restart", headers=auth()),
            400,
            "invalid_request",
        ),
    ]
    control.moved = True
    moved = api.post("/v1/changefeeds", json={**FEED, "name": "new"}, headers=auth())
    cases.append((moved, 503, "leader_moved"))
    no_leader = client(FakeControl(leading=False, holder=None))
    cases.append((no_leader.post("/v1/changefeeds", json=FEED, headers=auth()), 503, "no_leader"))
    for response, status, code in cases:
        if code is None:  # not a refusal: a feed's answer
            assert response.status_code == status and "error_code" not in response.json()
            continue
        body = response.json()
        assert (response.status_code, set(body)) == (status, {"error_code", "message"}), body
        assert body["error_code"] == code and body["error_code"] in CODES
        assert body["message"]


def test_the_openapi_documents_the_error_body_and_its_codes() -> None:
    spec = client(FakeControl()).get("/openapi.json").json()
    schema = spec["components"]["schemas"]["ErrorBody"]
    assert set(schema["required"]) == {"error_code", "message"}
    for code in CODES:
        assert code in schema["properties"]["error_code"]["description"]
    put = spec["paths"]["/v1/changefeeds/{name}"]["put"]["responses"]
    for status in ("201", "400", "401", "409", "503"):
        assert status in put
    refused = put["409"]["content"]["application/json"]["schema"]["$ref"]
    assert refused.endswith("/ErrorBody")
    assert "/v1/changefeeds/{name}/tasks/{task}/restart" in spec["paths"]


@pytest.mark.parametrize(
    "sink_uri",
    ["kafka://u:SECRET@dc-b/out", "kafka://u:SECRET@dc-b", "ftp://u:SECRET@dc-b/out"],
)
def test_a_refused_sink_uri_is_quoted_without_its_password(sink_uri: str) -> None:
    body = {**FEED, "sink-uri": sink_uri, "mode": "ordered"}
    response = client(FakeControl()).post("/v1/changefeeds", json=body, headers=auth())
    assert response.status_code == 400, response.text
    message = response.json()["message"]
    assert "SECRET" not in response.text, message
    assert "u:****@dc-b" in message, message


def test_a_kafka_sink_uri_with_credentials_says_where_they_go() -> None:
    body = {**FEED, "sink-uri": "kafka://u:SECRET@dc-b"}
    response = client(FakeControl()).post("/v1/changefeeds", json=body, headers=auth())
    message = response.json()["message"]
    assert "names a cluster alias only (kafka://dc-b)" in message, message
    assert "dc-b.sasl.password" in message, message


def test_every_error_body_masks_a_uri_password_whoever_words_it() -> None:
    from crossfeed.services.coordinator.errors import body

    message = body("invalid_request", "sink: unknown cluster in postgresql://app:SECRET@db/x")
    assert message["message"] == "sink: unknown cluster in postgresql://app:****@db/x"
