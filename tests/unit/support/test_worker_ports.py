"""Each pytest-xdist worker hands out ports from a block of its own (worker_stack)."""

from __future__ import annotations

import pytest

from tests.support import worker_stack


def test_workers_blocks_are_disjoint_and_below_the_local_stack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    blocks = []
    for n in range(10):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", f"gw{n}")
        block = worker_stack.port_block()
        assert block is not None
        blocks.append(set(block))
    assert all(not (a & b) for i, a in enumerate(blocks) for b in blocks[i + 1 :])
    # below the local stack's lowest port, which the run's offset shifts as well
    assert max(max(b) for b in blocks) < 15000 + worker_stack._RUN_OFFSET
