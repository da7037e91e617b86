"""Waiting for something a test expects to happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(check: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll ``check()`` until it returns something truthy; returns it."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not {what} after {timeout}s")
        time.sleep(every)
