"""The changefeed lifecycle through REST and through the CLI, against two real
coordinators (a leader and a standby) on the real clusters, with an API token."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from crossfeed.cli.main import app
from crossfeed.client.rest import ApiError, CoordinatorClient
from tests.integration.test_coordinator_process import (
    TOKEN,
    UNREACHABLE,
    Coordinators,
    coordinator_group,
    remove_feed_quietly,
)
from tests.support.clusters import Clusters

pytestmark = pytest.mark.integration
runner = CliRunner()


@pytest.fixture(scope="module")
def pair(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Coordinators]:
    yield from coordinator_group(clusters, tmp_path_factory.mktemp("api"), 2)


@pytest.fixture
def standby(pair: Coordinators) -> str:
    """URL of the standby: every request goes there, mutations are forwarded."""
    return pair.standbys(pair.leader())[0].url


@pytest.fixture
def name(pair: Coordinators) -> Iterator[str]:
    feed_name = f"api-{uuid.uuid4().hex[:8]}"
    yield feed_name
    remove_feed_quietly(pair, feed_name)


def feed(feed_name: str, **overrides: Any) -> dict[str, Any]:
    return {
        "name": feed_name,
        "source": "dc-a",
        "sink-uri": "kafka://dc-b",
        "topics": [f"{feed_name}-.*"],
        "config": {"staging.partitions": "3"},
        **overrides,
    }


def cli(pair: Coordinators, server: str, *args: str) -> Any:
    return runner.invoke(
        app, ["--config", str(pair.config_file), *args, "--server", server], terminal_width=200
    )


# -- REST ---------------------------------------------------------------------------------


def test_lifecycle_through_rest(pair: Coordinators, standby: str, name: str) -> None:
    leader = pair.leader()
    raw = httpx.post(
        f"{standby}/v1/changefeeds",
        json=feed(name),
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    # the standby sends it on and answers with the leader's answer: no redirect
    assert raw.status_code == 201, raw.text
    assert raw.json()["name"] == name
    with CoordinatorClient(leader.url, TOKEN) as api:
        api.remove_feed(name)

    with CoordinatorClient(standby, TOKEN) as api:
        created = api.create_feed(feed(name, exclude=[f"{name}-skip"]))
        assert (created["name"], created["state"]) == (name, "normal")
        assert created["config"] == {"staging.partitions": "3"}
        # GETs are answered by the standby from its own copy of the state
        assert name in [f["name"] for f in api.list_feeds()]
        detail = api.get_feed(name)
        assert detail["feed"]["exclude"] == [f"{name}-skip"]
        assert [t["task"] for t in detail["status"]["tasks"]] == [f"{name}/{s}" for s in range(3)]
        assert api.pause_feed(name)["state"] == "paused"
        assert api.pause_feed(name)["state"] == "paused"  # idempotent
        assert api.get_feed(name)["feed"]["state"] == "paused"
        assert api.resume_feed(name)["state"] == "normal"
        assert name in [f["name"] for f in api.status()]
        assert api.remove_feed(name)["state"] == "removed"
        assert name not in [f["name"] for f in api.list_feeds()]
        assert name in [f["name"] for f in api.list_feeds(include_removed=True)]
        # a removed feed's name may be used again
        assert api.create_feed(feed(name))["state"] == "normal"
        api.remove_feed(name)
        ha = api.ha_status()
        assert ha["role"] == "standby" and ha["leader"] == leader.instance


@pytest.mark.parametrize(
    ("overrides", "code", "message"),
    [
        ({"source": "dc-x"}, 400, "unknown cluster alias 'dc-x' (known: dc-a, dc-b, dc-gone)"),
        ({"sink-uri": "kafka://dc-y"}, 400, "sink: unknown cluster alias 'dc-y'"),
        ({"source": "dc-gone"}, 400, f"source cluster dc-gone: no broker answers at {UNREACHABLE}"),
        ({"topics": ["orders("]}, 400, "'orders('"),
        ({"exclude": ["[x"]}, 400, "'[x'"),
        ({"topics": []}, 400, "give at least one topic name or regex"),
        ({"sink-uri": "s3://bucket"}, 400, "unknown scheme 's3'"),
        ({"sink-uri": "kafka://dc-a"}, 400, "source and target are both 'dc-a'"),
        ({"config": {"speed": "fast"}}, 400, "unknown option 'speed' (--config)"),
        ({"config": {"staging.partitions": "zero"}}, 400, "staging.partitions"),
        ({"mode": "sideways"}, 400, "mode: Input should be 'mirror' or 'ordered'"),
        ({"start": "yesterday"}, 400, "start: Input should be 'earliest' or 'latest'"),
        ({"name": "No Spaces"}, 400, "feed name 'No Spaces' must be"),
        ({"colour": "red"}, 400, "unknown field 'colour'"),
    ],
)
def test_bad_input_through_rest(
    standby: str, name: str, overrides: dict[str, Any], code: int, message: str
) -> None:
    with CoordinatorClient(standby, TOKEN) as api, pytest.raises(ApiError) as err:
        api.create_feed(feed(name, **overrides))
    assert err.value.status_code == code
    assert message in err.value.message


def test_refusals_through_rest(standby: str, name: str) -> None:
    with CoordinatorClient(standby, TOKEN) as api:
        api.create_feed(feed(name))
        with pytest.raises(ApiError) as taken:
            api.create_feed(feed(name))
        assert (taken.value.status_code, taken.value.error_code) == (409, "feed_exists")
        assert f"changefeed {name!r} already exists" in taken.value.message
        for call in (api.get_feed, api.pause_feed, api.resume_feed, api.remove_feed):
            with pytest.raises(ApiError) as missing:
                call(f"{name}-nope")
            assert (missing.value.status_code, missing.value.error_code) == (404, "feed_not_found")
        api.remove_feed(name)
    for token in (None, "wrong"):
        with CoordinatorClient(standby, token) as anonymous, pytest.raises(ApiError) as denied:
            anonymous.pause_feed(name)
        assert denied.value.status_code == 401
    body = httpx.post(
        f"{standby}/v1/changefeeds",
        content=b"{not json",
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        follow_redirects=False,
    )
    assert body.status_code == 400


def test_put_creates_then_updates_idempotently(standby: str, name: str) -> None:
    with CoordinatorClient(standby, TOKEN) as api:
        created = api.put_feed(feed(name))
        assert (created["name"], created["state"]) == (name, "normal")
        assert api.put_feed(feed(name)) == created  # the same again: nothing changes
        updated = api.put_feed(feed(name, topics=[f"{name}-.*", "other"], exclude=["x"]))
        assert (updated["topics"], updated["exclude"]) == ([f"{name}-.*", "other"], ["x"])
        assert updated["created_at_ms"] == created["created_at_ms"]
        assert api.get_feed(name)["feed"]["topics"] == [f"{name}-.*", "other"]
        with pytest.raises(ApiError) as fixed:
            api.put_feed(feed(name, source="dc-b", **{"sink-uri": "kafka://dc-a"}))
        assert (fixed.value.status_code, fixed.value.error_code) == (409, "immutable_field")
        assert "source cannot change once the feed exists" in fixed.value.message
        restarted = api.restart_feed(name, 2)
        assert restarted == {"feed": name, "tasks": [f"{name}/2"]}
        api.pause_feed(name)
        with pytest.raises(ApiError) as paused:
            api.restart_feed(name)
        assert (paused.value.status_code, paused.value.error_code) == (409, "invalid_state")


def test_a_sink_password_is_never_answered_nor_logged_and_survives_an_update(
    pair: Coordinators, standby: str, name: str
) -> None:
    secret = f"pw-{uuid.uuid4().hex[:10]}"
    uri = f"postgresql://app:{secret}@127.0.0.1:25432/app?schema=s"
    body = feed(name, mode="ordered", **{"sink-uri": uri})
    with CoordinatorClient(standby, TOKEN) as api:
        created = api.put_feed(body)
        shown = "postgresql://app:****@127.0.0.1:25432/app?schema=s"
        assert created["sink_uri"] == shown
        got = api.get_feed(name)
        listed = api.request("GET", "/v1/changefeeds")
        status = api.request("GET", "/v1/status")
        # An update made from what GET shows (password masked) keeps the real password:
        # sending the real URI afterwards is "the same feed", not a change of sink.
        again = {**body, "sink-uri": got["feed"]["sink_uri"], "topics": [f"{name}-.*", "t2"]}
        assert api.put_feed(again)["topics"] == [f"{name}-.*", "t2"]
        assert api.put_feed({**again, "sink-uri": uri})["sink_uri"] == shown
        with pytest.raises(ApiError) as changed:
            api.put_feed({**again, "sink-uri": uri.replace(secret, "other")})
        assert changed.value.error_code == "immutable_field"
    answers = json.dumps([created, got, listed, status]) + changed.value.message
    assert secret not in answers and "other@" not in answers
    for coordinator in pair.procs:
        assert secret not in coordinator.log_text(), coordinator.describe()


# -- CLI ----------------------------------------------------------------------------------


def test_lifecycle_through_the_cli(
    pair: Coordinators, standby: str, name: str, tmp_path: Path
) -> None:
    created = cli(
        pair,
        standby,
        "changefeed", "create", name,
        "--source", "dc-a",
        "--sink-uri", "kafka://dc-b",
        "--topics", f"{name}-a.*",
        "--topics", f"{name}-b",
        "--exclude", f"{name}-a-old",
        "--mode", "mirror",
        "--rename-format", "${topic}",
        "--start", "latest",
        "--config", "staging.partitions=2",
        "--config", "errors.tolerance=none",
    )  # fmt: skip
    assert created.exit_code == 0, created.output
    assert f"created changefeed {name}: dc-a -> kafka://dc-b, mirror" in created.output

    listed = cli(pair, standby, "changefeed", "list")
    assert listed.exit_code == 0 and name in listed.output
    assert "\x1b[" not in listed.output  # no colours when not in a terminal

    got = cli(pair, standby, "changefeed", "get", name)
    assert got.exit_code == 0, got.output
    assert "start:          latest" in got.output
    assert "errors.tolerance=none" in got.output

    as_json = json.loads(cli(pair, standby, "changefeed", "get", name, "--json").output)
    assert as_json["feed"]["exclude"] == [f"{name}-a-old"]

    for verb, state in (("pause", "paused"), ("resume", "normal"), ("remove", "removed")):
        result = cli(pair, standby, "changefeed", verb, name)
        assert result.exit_code == 0, result.output
        assert f"changefeed {name} is {state}" in result.output

    feed_file = tmp_path / "feed.yaml"
    feed_file.write_text(yaml.safe_dump(feed(name)))
    from_file = cli(pair, standby, "changefeed", "create", "--feed-file", str(feed_file))
    assert from_file.exit_code == 0, from_file.output

    updated = cli(
        pair, standby, "changefeed", "update", name, "--topics", f"{name}-new", "--config",
        "errors.tolerance=none",
    )  # fmt: skip
    assert updated.exit_code == 0, updated.output
    changed = json.loads(cli(pair, standby, "changefeed", "get", name, "--json").output)["feed"]
    assert changed["topics"] == [f"{name}-new"]
    assert changed["config"] == {"staging.partitions": "3", "errors.tolerance": "none"}
    refused = cli(pair, standby, "changefeed", "update", name, "--source", "dc-gone")
    assert refused.exit_code == 1 and "source cannot change" in refused.output

    captures = cli(pair, standby, "capture", "list")
    assert captures.exit_code == 0, captures.output
    assert pair.leader().instance in captures.output and "coordinator" in captures.output

    table = cli(pair, standby, "status")
    assert table.exit_code == 0, table.output
    assert "FEED" in table.output and name in table.output and "3: " in table.output
    status = json.loads(cli(pair, standby, "status", "--json").output)
    assert name in [f["name"] for f in status["feeds"]]
    assert status["ha"]["leader"] == pair.leader().instance
    assert cli(pair, standby, "changefeed", "remove", name).exit_code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--source", "dc-x"], "unknown cluster alias 'dc-x'"),
        (["--source", "dc-gone"], "no broker answers at 127.0.0.1:9"),
        (["--topics", "("], "'('"),
        (["--sink-uri", "mongodb://x"], "unknown scheme 'mongodb'"),
        (["--config", "nope=1"], "unknown option 'nope'"),
        (["--config", "staging.partitions"], "--config expects key=value"),
        (["--mode", "fast"], "mode: Input should be 'mirror' or 'ordered'"),
        (["--start", "now"], "start: Input should be 'earliest' or 'latest'"),
    ],
)
def test_bad_input_through_the_cli(
    pair: Coordinators, standby: str, name: str, args: list[str], message: str
) -> None:
    base = {"--source": "dc-a", "--sink-uri": "kafka://dc-b", "--topics": "t.*"}
    given = dict(zip(args[::2], args[1::2], strict=True))
    options = [x for key, value in {**base, **given}.items() for x in (key, value)]
    result = cli(pair, standby, "changefeed", "create", name, *options)
    assert result.exit_code == 1, result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 2  # one line (soft-wrapped at most)


def test_cli_refusals(pair: Coordinators, standby: str, name: str, tmp_path: Path) -> None:
    missing = cli(pair, standby, "changefeed", "pause", name)
    assert missing.exit_code == 1 and f"no changefeed named '{name}'" in missing.output
    no_name = cli(pair, standby, "changefeed", "create", "--source", "dc-a")
    assert no_name.exit_code == 1 and "give the feed NAME" in no_name.output
    bad_file = tmp_path / "feed.yaml"
    bad_file.write_text("name: [unclosed")
    result = cli(pair, standby, "changefeed", "create", "--feed-file", str(bad_file))
    assert result.exit_code == 1 and "is not valid YAML" in result.output

    config = yaml.safe_load(pair.config_file.read_text())
    config.pop("api_token")
    tokenless = tmp_path / "tokenless.yaml"
    tokenless.write_text(yaml.safe_dump(config))
    denied = runner.invoke(
        app, ["--config", str(tokenless), "changefeed", "remove", name, "--server", standby]
    )
    assert denied.exit_code == 1 and "requires an API token" in denied.output


def test_cli_says_how_to_start_a_coordinator_when_none_answers(pair: Coordinators) -> None:
    result = cli(pair, "http://127.0.0.1:9", "status")
    assert result.exit_code == 1
    assert "cannot reach the coordinator at http://127.0.0.1:9/v1/status" in result.output
    assert "crossfeed coordinator run" in result.output
