"""The demo scenario, non-interactively: replicate, lose dc-a, fail the group over."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from crossfeed.kafka import clients

pytestmark = [pytest.mark.integration, pytest.mark.e2e]


def _demo() -> dict[str, float]:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "crossfeed.cli.main",
            "demo",
            "--no-tty",
            "--json",
            "--records",
            "1500",
            "--rate",
            "750",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    # The live view shows the feed as the coordinator has it (it said "starting" for ever).
    assert "feed state: normal" in run.stdout, run.stdout[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_demo_twice_in_a_row_loses_nothing_and_rereads_nothing(clusters):
    if clusters.backend != "local":
        pytest.skip("the demo runs on the local stack")
    for _ in range(2):  # running it twice in a row works
        summary = _demo()
        assert summary["produced"] == 1500
        assert summary["lost"] == 0
        assert summary["replicated"] == summary["produced"]
        assert summary["re_read"] == 0
        assert summary["skipped"] == 0
        assert summary["consumed_before"] > 0 and summary["consumed_after"] > 0
        assert summary["consumed_before"] + summary["consumed_after"] == summary["produced"]
        # dc-a is back afterwards, same cluster
        assert clients.cluster_id(clusters.a.config, 30) == clusters.a.cluster_id
