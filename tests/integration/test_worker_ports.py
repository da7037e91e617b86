"""free_port under pytest-xdist: each worker walks a block of its own (worker_stack),
with real sockets."""

from __future__ import annotations

import pytest

from tests.support import services, worker_stack


def test_without_workers_the_kernel_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert worker_stack.port_block() is None
    assert services.free_port() != services.free_port()


def test_a_worker_hands_out_every_port_of_its_block_before_any_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Linux gives bind(0) odd ports only: a worker must get even ones too."""
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    block = worker_stack.port_block()
    assert block is not None
    handed = [services.free_port() for _ in range(50)]
    assert len(set(handed)) == 50 and set(handed) <= set(block)
    assert any(p % 2 == 0 for p in handed) and any(p % 2 == 1 for p in handed)
