"""The command surface of docs/design.md, Interfaces."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from crossfeed import __version__
from crossfeed.cli.feed_ops import update_body
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
        "capture",
    ):
        assert command in out
    sub = runner.invoke(app, ["changefeed", "--help"], terminal_width=200).output
    for verb in (
        "create",
        "list",
        "get",
        "pause",
        "resume",
        "remove",
        "update",
        "restart",
        "ack-gap",
    ):
        assert verb in sub
    local = runner.invoke(app, ["local", "--help"], terminal_width=200).output
    for verb in ("up", "down", "status", "stop", "start"):
        assert verb in local
    for service in ("puller", "sink", "sorter", "coordinator"):
        assert "run" in runner.invoke(app, [service, "--help"]).output
    assert "translate" in runner.invoke(app, ["groups", "--help"]).output


def test_version_flag_and_command() -> None:
    for args in (["--version"], ["version"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and __version__ in result.output


def test_update_lays_what_is_given_over_the_stored_feed() -> None:
    stored = {
        "name": "orders",
        "source": "dc-a",
        "sink_uri": "kafka://dc-b",
        "mode": "mirror",
        "topics": ["o.*"],
        "exclude": ["o.tmp"],
        "rename_format": "${topic}",
        "start": "earliest",
        "config": {"staging.partitions": "4", "errors.tolerance": "all"},
        "state": "normal",
        "created_at_ms": 1,
    }
    body = update_body(stored, {"topics": ["o.*", "p"]}, {"errors.tolerance": "none"})
    assert body == {
        "name": "orders",
        "source": "dc-a",
        "sink-uri": "kafka://dc-b",
        "mode": "mirror",
        "topics": ["o.*", "p"],
        "exclude": ["o.tmp"],
        "rename-format": "${topic}",
        "start": "earliest",
        "config": {"staging.partitions": "4", "errors.tolerance": "none"},
    }


def test_ack_gap_refuses_a_key_not_as_the_status_prints_it_before_asking_anyone():
    result = runner.invoke(
        app, ["changefeed", "ack-gap", "orders", "orders.eu/3", "--server", "http://192.0.2.1:1"]
    )
    assert result.exit_code == 1
    assert "topic>/<partition>@<offset>" in result.output


def _command_paths() -> list[list[str]]:
    """Every command and subcommand of the CLI, as argument lists."""
    import typer.main

    paths: list[list[str]] = []

    def walk(command: object, path: list[str]) -> None:
        paths.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


def test_every_help_fits_80_columns_and_shows_flags_without_a_type() -> None:
    paths = _command_paths()
    assert len(paths) > 30  # the walk found the subcommands
    for path in paths:
        result = runner.invoke(app, [*path, "--help"], terminal_width=80)
        assert result.exit_code == 0, (path, result.output)
        lines = result.output.splitlines()
        too_wide = [line for line in lines if len(line) > 80]
        assert not too_wide, (path, too_wide)
        assert "<bool>" not in result.output, (path, result.output)


def test_the_cdc_add_hint_names_the_topics_the_docs_use() -> None:
    from crossfeed.cli.cdc import feed_topics

    assert feed_topics("pg1", []) == ["pg1\\.public\\..*"]  # as README and docs/cdc.md
    assert feed_topics("pg1", ["app.accounts", "app.ledger", "audit.log"]) == [
        "pg1\\.app\\..*",
        "pg1\\.audit\\..*",
    ]


def test_no_command_list_cuts_a_sentence_short() -> None:
    """Click shortens a command's help to a cut sentence ending in "..." when its first
    sentence is long; every listed command reads as a whole sentence instead."""
    for path in _command_paths():
        output = runner.invoke(app, [*path, "--help"], terminal_width=80).output
        listed = output.split("Commands:", 1)[1] if "Commands:" in output else ""
        cut = [line.strip() for line in listed.splitlines() if line.rstrip().endswith("...")]
        assert not cut, (path, cut)
