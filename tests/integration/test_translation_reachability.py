"""The quick look at a source cluster before a failover's final translation round, against
loopback sockets: one listening, others closed (no Kafka). What needs no socket is in
tests/unit/translation/test_reachability.py."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from crossfeed.kafka.reachable import accepts_connections
from crossfeed.translation.kafka_io import ClusterAdmin, Unreachable, list_groups

pytestmark = pytest.mark.integration


def _closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_listening_server_is_reachable_even_after_dead_ones() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        dead = _closed_port()
        conf = {"bootstrap.servers": f"127.0.0.1:{dead},127.0.0.1:{port}"}
        assert accepts_connections(conf, 2.0)


def test_a_cluster_refusing_every_connection_is_known_lost_at_once() -> None:
    conf = {"bootstrap.servers": f"127.0.0.1:{_closed_port()},127.0.0.1:{_closed_port()}"}
    began = time.monotonic()
    assert not accepts_connections(conf, 5.0)
    # Refused connects answer in a round trip; the timeout is not waited out.
    assert time.monotonic() - began < 2.0


def _list_groups_in_background(cluster: ClusterAdmin, timeout_s: float) -> dict[str, float]:
    """Runs list_groups (a real librdkafka admin request) on a thread; fills ``ended``."""
    out: dict[str, float] = {}

    def run() -> None:
        try:
            list_groups(cluster, timeout_s)
        except Unreachable:
            out["ended"] = time.monotonic()

    threading.Thread(target=run, daemon=True).start()
    return out


def test_an_interrupt_ends_a_request_waiting_on_a_dead_cluster_at_once() -> None:
    """The failover's final round must not wait for a tick stuck on the lost source."""
    cluster = ClusterAdmin({"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}, quiet=True)
    out = _list_groups_in_background(cluster, 5.0)
    time.sleep(0.5)
    assert "ended" not in out  # still waiting for the dead cluster
    interrupted = time.monotonic()
    cluster.interrupt()
    deadline = interrupted + 3.0
    while "ended" not in out and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "ended" in out, "the request did not give up"
    assert out["ended"] - interrupted < 1.0


def test_an_interrupt_does_not_touch_requests_started_after_it() -> None:
    cluster = ClusterAdmin({"bootstrap.servers": f"127.0.0.1:{_closed_port()}"}, quiet=True)
    cluster.interrupt()
    began = time.monotonic()
    out = _list_groups_in_background(cluster, 1.0)
    time.sleep(0.5)
    assert "ended" not in out  # waits out its own timeout as usual
    deadline = began + 5.0
    while "ended" not in out and time.monotonic() < deadline:
        time.sleep(0.02)
    assert out.get("ended", deadline) - began >= 1.0
