"""Every test under tests/unit is a unit test: marked ``unit`` here (so ``make unit`` runs
them all), and kept off the network — a unit test that binds or connects an internet
socket fails at once. Tests that need a listening server live in tests/integration.

Property tests have no deadline: how long an example takes is the machine's load, not
behaviour (speed is measured in ``make bench``)."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("crossfeed", deadline=None)
settings.load_profile("crossfeed")

HERE = Path(__file__).resolve().parent
INTERNET = (socket.AF_INET, socket.AF_INET6)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.unit)


class SocketInUnitTest(RuntimeError):
    """A unit test tried to bind or connect a TCP/UDP socket."""


def _refuse(name: str) -> Any:
    original = getattr(socket.socket, name)

    def guarded(self: socket.socket, address: Any, *args: Any) -> Any:
        if self.family in INTERNET:
            raise SocketInUnitTest(
                f"a unit test called socket.{name}({address!r}): "
                "move it to tests/integration or give it a fake"
            )
        return original(self, address, *args)

    return guarded


@pytest.fixture(autouse=True)
def no_internet_sockets(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Unix sockets stay allowed (asyncio's self-pipe, for one)."""
    for name in ("bind", "connect", "connect_ex"):
        monkeypatch.setattr(socket.socket, name, _refuse(name))
    yield
