"""deploy/docker/healthcheck.py against a service's own /healthz server (a loopback socket)."""

from __future__ import annotations

import pytest

from crossfeed import httpserve
from tests.support.deploy_files import (
    DOCKER,
)

pytestmark = pytest.mark.integration


def test_healthcheck_script_follows_healthz(monkeypatch):
    """The script the images, compose and probes use, against the services' own server."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("healthcheck", DOCKER / "healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    state = {"state": "running"}
    server = httpserve.serve(lambda: dict(state))
    try:
        port = str(server.server_address[1])
        assert module.main(["crossfeed-healthcheck", port]) == 0
        monkeypatch.setenv("CROSSFEED_METRICS_PORT", port)
        assert module.main(["crossfeed-healthcheck"]) == 0
        state["state"] = "failed"  # /healthz answers 503
        assert module.main(["crossfeed-healthcheck", port]) == 1
    finally:
        server.shutdown()
        server.server_close()
    assert module.main(["crossfeed-healthcheck", port]) == 1  # nothing listens
