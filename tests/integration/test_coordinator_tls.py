"""The REST API over https: two real coordinators serving TLS with a certificate made on
the spot, a standby forwarding a change to the leader over https, the CLI trusting the
coordinators' CA (``server_ca_file``) — and a coordinator that refuses to listen on every
interface without an API token."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from crossfeed.cli.main import app
from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.local.secure import make_certs
from tests.integration.test_coordinator_process import TOKEN, Coordinators
from tests.support.clusters import Clusters

pytestmark = pytest.mark.integration
runner = CliRunner()


def test_coordinators_serve_https_and_forward_over_it(clusters: Clusters, tmp_path: Path) -> None:
    certs = make_certs(tmp_path / "certs")
    group = Coordinators(clusters, tmp_path)
    config = yaml.safe_load(group.config_file.read_text())
    config["coordinator"] = {"tls_cert_file": str(certs.server), "tls_key_file": str(certs.server)}
    config["server_ca_file"] = str(certs.ca)
    group.config_file.write_text(yaml.safe_dump(config))
    name = f"tls-{uuid.uuid4().hex[:8]}"
    standby = ""
    try:
        procs = group.start(2)
        urls = [f"https://127.0.0.1:{p.rest_port}" for p in procs]
        with CoordinatorClient(",".join(urls), TOKEN, ca_file=str(certs.ca)) as api:
            deadline = time.monotonic() + 90
            while True:  # a leader is elected and both answer over https
                try:
                    roles = {
                        CoordinatorClient(u, ca_file=str(certs.ca)).request("GET", "/v1/ha/status")[
                            "role"
                        ]
                        for u in urls
                    }
                    if roles == {"leader", "standby"}:
                        break
                except (ApiError, httpx.HTTPError):
                    pass
                assert time.monotonic() < deadline, "no leader over https"
                time.sleep(0.5)
            standby = next(
                u
                for u in urls
                if CoordinatorClient(u, ca_file=str(certs.ca)).request("GET", "/v1/ha/status")[
                    "role"
                ]
                == "standby"
            )
        # A change sent to the standby reaches the leader (forwarded over https).
        with CoordinatorClient(standby, TOKEN, ca_file=str(certs.ca)) as api:
            created = api.put_feed(
                {"name": name, "source": "dc-a", "sink-uri": "kafka://dc-b", "topics": ["x"]}
            )
            assert created["name"] == name
        listed = runner.invoke(
            app,
            ["--config", str(group.config_file), "changefeed", "list", "--server", standby],
            terminal_width=200,
        )
        assert listed.exit_code == 0 and name in listed.output, listed.output
        # Plain http is not spoken, and a client that does not trust the CA is refused.
        with pytest.raises(httpx.HTTPError):
            httpx.get(standby.replace("https", "http") + "/v1/ha/status", timeout=3)
        with pytest.raises(httpx.ConnectError):
            httpx.get(standby + "/v1/ha/status", timeout=3)
        with CoordinatorClient(standby, TOKEN, ca_file=str(certs.ca)) as api:
            api.remove_feed(name)  # leave the shared state tidy
    finally:
        group.stop()


def test_no_token_no_listening_on_every_interface(tmp_path: Path) -> None:
    config = tmp_path / "crossfeed.yaml"
    config.write_text("dc-a.bootstrap.servers: 127.0.0.1:9\n")
    refused = runner.invoke(
        app, ["--config", str(config), "coordinator", "run", "--host", "0.0.0.0"]
    )
    assert refused.exit_code == 1
    assert "0.0.0.0 without an API token" in refused.output
    assert "--insecure" in refused.output and "api_token" in refused.output
