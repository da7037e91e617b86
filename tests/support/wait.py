"""Waiting in integration tests for something the system does on its own time."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = 60.0) -> Any:
    """``check()``'s first truthy answer, tried every 0.5 s; AssertionError naming
    ``what`` and the last answer after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"{what}: not after {timeout_s}s (last: {last})")
