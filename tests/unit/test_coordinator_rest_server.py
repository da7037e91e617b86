"""The coordinator's REST server accepts connections from the moment it exists."""

from __future__ import annotations

import socket

import httpx
from fastapi import FastAPI

from crossfeed.services.coordinator.rest_server import RestServer


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
