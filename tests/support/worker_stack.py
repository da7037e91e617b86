"""A local stack per pytest-xdist worker (loaded with ``-p``, before any conftest).

``make test`` runs the integration tests in three workers (pytest-xdist, a test file at a
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
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

from crossfeed import paths

OFFSET_STEP = 100
"""Ports between two workers' stacks: every local-stack port (and the quick-start test's,
+1000) stays apart for up to ten workers."""


def worker_index() -> int | None:
    """N of this process's ``gwN``; None in a run without workers."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else None


PORT_BLOCK_BASE = 5000
PORT_BLOCK_SIZE = 1000
"""Worker gwN's test ports (services' metrics and REST ports): 1,000 from
``5000 + offset + 1000 * N``, below every local-stack port (15000 and up) and below the
kernel's ephemeral ports (32768 and up)."""


def port_block() -> range | None:
    """The ports this worker hands out to the services it starts; None without workers.
    A port is handed out again only after the whole block was (the caller cycles)."""
    index = worker_index()
    if index is None:
        return None
    start = PORT_BLOCK_BASE + _RUN_OFFSET + PORT_BLOCK_SIZE * index
    return range(start, start + PORT_BLOCK_SIZE)


_RUN_OFFSET = int(os.environ.get("CROSSFEED_LOCAL_PORT_OFFSET", "0") or 0)
"""The offset the run was given, read before this worker shifts its own."""


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


# Which worker runs what: a group of tests runs whole in one worker, one group after the
# other, longest first (FileGroups below). A group is a test file, except that files
# sharing an expensive session stack share a group, so that stack starts once per run:
# Kafka Connect with Debezium, the secured pair.
SHARED_STACK = {
    "test_cdc.py": "connect",
    "test_cdc_avro.py": "connect",
    "test_cdc_avro_follow.py": "connect",
    "test_disaster_recovery.py": "connect",
    "test_commit_stream.py": "secured",
    "test_coordinator_tls.py": "secured",
    "test_secured_clusters.py": "secured",
    "test_secured_follows.py": "secured",
}

# Seconds each long file took in a whole run (--durations=0, one worker). Groups start
# longest first, so that no worker is left with a long file at the end while the other
# idles; a file not listed counts as short.
MEASURED_S = {
    "test_active_active.py": 346,
    "test_quickstarts.py": 192,
    "test_outages.py": 190,
    "test_cdc.py": 155,
    "test_sorter.py": 139,
    "test_disaster_recovery.py": 139,
    "test_failover_clients.py": 131,
    "test_demo.py": 122,
    "test_mirror.py": 118,
    "test_switchover_failback.py": 113,
    "test_failover_real_clients.py": 101,
    "test_failover.py": 98,
    "test_mirror_follows.py": 91,
    "test_ordered_e2e.py": 78,
    "test_secured_clusters.py": 69,
    "test_translation_deleted.py": 68,
    "test_cdc_avro_follow.py": 65,
    "test_ordered_kafka_sink.py": 64,
    "test_cdc_avro.py": 64,
    "test_puller_membership.py": 59,
    "test_postgres_sink.py": 58,
    "test_coordinator_ha.py": 53,
    "test_local_stack.py": 49,
    "test_coordinator_mirror.py": 49,
    "test_sorter_parse.py": 44,
}


def group_of(path: str) -> str:
    """The group of the test file at ``path`` (as a node id starts: relative, with /)."""
    return SHARED_STACK.get(path.rsplit("/", 1)[-1], path)


def _group_of_item(item: pytest.Item) -> str:
    return group_of(item.nodeid.split("::", 1)[0])


def schedule(items: list[pytest.Item]) -> None:
    """Order the groups longest first (in place); a group's tests keep their order. Every
    worker collects in this order, and FileGroups hands out the groups in it."""
    weights: dict[str, int] = {}
    counted: set[str] = set()
    for item in items:
        group = _group_of_item(item)
        weights.setdefault(group, 0)
        if item.path.name not in counted:
            counted.add(item.path.name)
            weights[group] += MEASURED_S.get(item.path.name, 0)
    position = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-weights[_group_of_item(item)], position[id(item)]))


class FileGroups(LoadScopeScheduling):
    """``--dist loadgroup`` as this suite needs it: a work unit is a group of
    :func:`group_of`, handed out in collection order (longest first, :func:`schedule`).

    pytest-xdist's own loadgroup reads a group from an ``@name`` suffix of the node id,
    which it adds to ``item._nodeid`` for an ``xdist_group`` mark; pytest 9.2 builds node
    ids from another attribute, so no id carries it and every test became a unit of its
    own: a file's tests, and the Connect files, ran on both workers, each worker starting
    its own Connect and secured pair. Here the group comes from the node id's file part,
    which every pytest has.
    """

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        # xdist would otherwise reorder the units by their number of tests: ours are
        # already longest first by measured time, which is what keeps every worker busy
        # to the end.
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid.split("::", 1)[0])
