"""A local stack per pytest-xdist worker (loaded with ``-p``, before any conftest).

``make test`` runs the integration tests in two workers (pytest-xdist, a test file at a
time per worker). Each worker needs brokers, databases and Connect of its own: tests stop
clusters, fill databases and count what a topic holds. Worker ``gwN`` therefore gets the
port offset ``$CROSSFEED_LOCAL_PORT_OFFSET + 100 * N`` and, past the first worker, a home
of its own (``.crossfeed-gwN`` beside ``.crossfeed``); ``gw0`` keeps the checkout's stack.
The local stack's modules read both when they are imported, so this runs first. The
jars ``make setup`` resolved stay shared (crossfeed/paths.py: ``lib_dir``).

Without xdist (``pytest -p no:xdist``, a single test) nothing changes.
"""

from __future__ import annotations

import os

from crossfeed import paths

OFFSET_STEP = 100
"""Ports between two workers' stacks: every local-stack port (and the quick-start test's,
+1000) stays apart for up to ten workers."""


def worker_index() -> int | None:
    """N of this process's ``gwN``; None in a run without workers."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


def worker_count() -> int:
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)


def _place_this_worker() -> None:
    index = worker_index()
    if not index:  # no workers, or gw0: the checkout's stack
        return
    base = int(os.environ.get("CROSSFEED_LOCAL_PORT_OFFSET", "0") or 0)
    os.environ["CROSSFEED_LOCAL_PORT_OFFSET"] = str(base + OFFSET_STEP * index)
    if "CROSSFEED_HOME" not in os.environ:
        os.environ["CROSSFEED_HOME"] = str(paths.project_root() / f".crossfeed-gw{index}")
    else:
        os.environ["CROSSFEED_HOME"] = f"{os.environ['CROSSFEED_HOME']}-gw{index}"


_place_this_worker()
