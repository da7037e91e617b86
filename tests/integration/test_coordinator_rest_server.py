"""The coordinator's REST server on a loopback socket (no Kafka): it accepts connections
from the moment it exists, and the CLI reads the status through it."""

from __future__ import annotations

import socket

import httpx
import pytest
from fastapi import FastAPI

from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator.api import make_app
from crossfeed.services.coordinator.records import StoredFeed
from crossfeed.services.coordinator.rest_server import RestServer
from tests.unit.coordinator.test_api import FEED, TOKEN, FakeControl

pytestmark = pytest.mark.integration


def test_a_client_that_connects_before_the_server_thread_runs_is_answered() -> None:
    app = FastAPI()

    @app.get("/ping")
    def ping() -> dict[str, str]:
        return {"pong": "yes"}

    server = RestServer(app, "127.0.0.1", 0)
    try:
        # Not started yet (as when its thread is slow to get going on a busy machine): the
        # connection waits in the listen backlog instead of being refused.
        early = socket.create_connection(("127.0.0.1", server.port), timeout=2)
        server.start()
        early.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        early.settimeout(10)
        answer = b""
        while chunk := early.recv(4096):  # Connection: close ends the answer
            answer += chunk
        early.close()
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b'{"pong":"yes"}')
        assert httpx.get(f"http://127.0.0.1:{server.port}/ping").json() == {"pong": "yes"}
    finally:
        server.stop()


def test_crossfeed_status_prints_the_commit_mode_of_each_feed() -> None:
    from typer.testing import CliRunner

    from crossfeed.cli.main import app as cli
    from crossfeed.services.coordinator.rest_server import RestServer

    control = FakeControl()
    control.feeds["orders"] = StoredFeed(FeedSpec.model_validate(FEED), 1)
    control.modes = {"orders": "poll (__consumer_offsets: [denied])"}
    server = RestServer(make_app(control, TOKEN), "127.0.0.1", 0).start()
    try:
        url = f"http://127.0.0.1:{server.port}"
        out = CliRunner().invoke(cli, ["status", "--server", url], catch_exceptions=False)
        assert out.exit_code == 0, out.output
        assert "orders: commits: poll (__consumer_offsets: [denied])" in out.output
        control.modes = {"orders": "stream"}
        out = CliRunner().invoke(cli, ["status", "--server", url], catch_exceptions=False)
        assert "orders: commits: stream" in out.output
    finally:
        server.stop()
