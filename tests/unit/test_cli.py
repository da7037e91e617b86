"""The command surface of docs/design.md, Interfaces."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from crossfeed.cli.main import app

pytestmark = pytest.mark.unit
runner = CliRunner()


def test_help_lists_every_subcommand_of_the_design():
    out = runner.invoke(app, ["--help"], terminal_width=200).output
    for command in (
        "changefeed",
        "status",
        "failover",
        "failback",
        "groups",
        "puller",
        "sink",
        "sorter",
        "coordinator",
        "local",
        "workload",
        "demo",
        "bench",
    ):
        assert command in out
    sub = runner.invoke(app, ["changefeed", "--help"], terminal_width=200).output
    for verb in ("create", "list", "get", "pause", "resume", "remove"):
        assert verb in sub
    local = runner.invoke(app, ["local", "--help"], terminal_width=200).output
    for verb in ("up", "down", "status", "stop", "start"):
        assert verb in local
    for service in ("puller", "sink", "sorter", "coordinator"):
        assert "run" in runner.invoke(app, [service, "--help"]).output
    assert "translate" in runner.invoke(app, ["groups", "--help"]).output
