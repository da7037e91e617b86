"""The guard of tests/unit/conftest.py: unit tests are marked and open no sockets."""

from __future__ import annotations

import socket

import pytest

from tests.unit.conftest import SocketInUnitTest


def test_a_unit_test_is_marked_unit(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("unit") is not None


@pytest.mark.parametrize("call", ["bind", "connect", "connect_ex"])
def test_a_unit_test_cannot_use_an_internet_socket(call: str) -> None:
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(SocketInUnitTest, match="tests/integration"),
    ):
        getattr(sock, call)(("127.0.0.1", 0))


def test_a_unit_socket_pair_still_works() -> None:
    left, right = socket.socketpair()
    with left, right:
        left.sendall(b"x")
        assert right.recv(1) == b"x"
