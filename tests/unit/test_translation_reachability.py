"""The quick look at a source cluster before a failover's final translation round."""

from __future__ import annotations

import socket
import time

import pytest

from crossfeed.translation.kafka_io import accepts_connections, bootstrap_addresses


def test_bootstrap_addresses_read_every_form_librdkafka_takes() -> None:
    assert bootstrap_addresses("127.0.0.1:19092, PLAINTEXT://b:9092,[::1]:9093") == [
        ("127.0.0.1", 19092),
        ("b", 9092),
        ("::1", 9093),
    ]


@pytest.mark.parametrize("bad", ["", "host", "host:", ":9092", "host:x"])
def test_bootstrap_addresses_reject_what_is_not_host_port(bad: str) -> None:
    with pytest.raises(ValueError, match="not host:port"):
        bootstrap_addresses(bad)


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


def test_no_time_means_not_reachable() -> None:
    assert not accepts_connections({"bootstrap.servers": "127.0.0.1:1"}, 0.0)
