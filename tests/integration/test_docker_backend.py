"""The testcontainers backend's plan takes a free host port per cluster (a loopback bind;
the rest of the plan is checked in tests/unit/support/test_docker_backend.py)."""

from __future__ import annotations

import re

import pytest

from tests.support.docker_backend import plans

pytestmark = pytest.mark.integration


def test_each_cluster_gets_its_own_cluster_id_and_port() -> None:
    a, b = plans()
    assert (a.alias, b.alias) == ("dc-a", "dc-b")
    assert a.cluster_id != b.cluster_id and a.host_port != b.host_port
    for plan in (a, b):
        assert re.fullmatch(r"[A-Za-z0-9_-]{22}", plan.cluster_id)  # a KRaft cluster id
        assert plan.env()["CLUSTER_ID"] == plan.cluster_id
    assert plans()[0].cluster_id != a.cluster_id  # fresh every session
