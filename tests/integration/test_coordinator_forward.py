"""A standby answers mutations with the leader's own answer (forward.py), and the client
tries each of several coordinators: two REST servers over fake coordinators on
loopback sockets (no Kafka)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.services.coordinator.api import make_app
from crossfeed.services.coordinator.members import MembersView
from crossfeed.services.coordinator.rest_server import RestServer
from tests.unit.coordinator.test_api import FEED, TOKEN, FakeControl, auth, coordinator

pytestmark = pytest.mark.integration

DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port


@pytest.fixture
def leader() -> Iterator[tuple[FakeControl, str]]:
    control = FakeControl(leading=True, holder="c1")
    server = RestServer(make_app(control, TOKEN), "127.0.0.1", 0).start()
    try:
        yield control, f"127.0.0.1:{server.port}"
    finally:
        server.stop()


def standby_of(address: str) -> FakeControl:
    control = FakeControl(leading=False, holder="c1")
    control.members = MembersView({"c1": coordinator("c1", address), "c2": coordinator("c2", "")})
    return control


def test_a_standby_answers_a_mutation_with_the_leaders_answer(
    leader: tuple[FakeControl, str],
) -> None:
    lead, address = leader
    standby_control = standby_of(address)
    standby = TestClient(make_app(standby_control, TOKEN), follow_redirects=False)
    created = standby.post("/v1/changefeeds", json=FEED, headers=auth())
    assert created.status_code == 201, created.text
    assert created.json()["name"] == "orders"
    assert "orders" in lead.feeds and "orders" not in standby_control.feeds
    put = standby.put("/v1/changefeeds/orders", json=FEED, headers=auth())
    assert (put.status_code, put.headers["x-crossfeed-outcome"]) == (200, "unchanged")
    paused = standby.post("/v1/changefeeds/orders/pause?x=1", headers=auth())
    assert paused.json()["state"] == "paused" and lead.statuses["orders"].state == "paused"
    # the leader checks the token it is given, and its refusals come back unchanged
    denied = standby.post("/v1/changefeeds/orders/resume", headers=auth("wrong"))
    assert (denied.status_code, denied.json()["error_code"]) == (401, "token_rejected")
    missing = standby.post("/v1/changefeeds/nope/pause", headers=auth())
    assert (missing.status_code, missing.json()["error_code"]) == (404, "feed_not_found")
    # reads are the standby's own
    assert standby.get("/v1/changefeeds").json() == []


def test_a_forwarded_request_is_not_forwarded_again_and_a_dead_leader_is_503() -> None:
    standby = TestClient(make_app(standby_of(DEAD.removeprefix("http://")), TOKEN))
    again = standby.post(
        "/v1/changefeeds",
        json=FEED,
        headers={**auth(), "X-Crossfeed-Forwarded-By": "c3"},
    )
    assert (again.status_code, again.json()["error_code"]) == (503, "leader_moved")
    dead = standby.post("/v1/changefeeds", json=FEED, headers=auth())
    assert (dead.status_code, dead.json()["error_code"]) == (503, "unavailable")
    assert "the leader c1 at 127.0.0.1:9 did not answer" in dead.json()["message"]


def test_the_client_tries_each_server_in_turn(leader: tuple[FakeControl, str]) -> None:
    _, address = leader
    with CoordinatorClient(f"{DEAD}, http://{address}/", TOKEN, retry_s=0) as api:
        assert api.create_feed(FEED)["name"] == "orders"
        assert api.servers[api.current] == f"http://{address}"
        assert [f["name"] for f in api.list_feeds()] == ["orders"]
    nobody = CoordinatorClient(f"{DEAD},http://127.0.0.1:7", TOKEN, retry_s=0)
    with nobody, pytest.raises(ApiError) as err:
        nobody.status()
    assert err.value.status_code is None and err.value.error_code == "unreachable"
    assert "http://127.0.0.1:9/v1/status" in err.value.message
    assert "http://127.0.0.1:7/v1/status" in err.value.message
    with pytest.raises(ApiError, match="no coordinator given"):
        CoordinatorClient(" , ")
