"""``crossfeed pair create|status|remove``: what the command sends to the coordinator and
how it prints the answers and refusals (the coordinator is a recording fake here)."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from typer.testing import CliRunner

from crossfeed.cli import pair
from crossfeed.cli.main import app
from crossfeed.client.rest import ApiError, CoordinatorClient
from crossfeed.local.connect import REST_PORT, REST_PORT_B
from crossfeed.local.postgres import SOURCE_URI, URI
from crossfeed.pair.ops import PairRequest

pytestmark = pytest.mark.unit
runner = CliRunner()


class Recorder:
    def __init__(self, answer: Any = None, error: ApiError | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.answer = answer
        self.error = error

    def __call__(self, client: CoordinatorClient, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        assert client._http.timeout.read == pair.PAIR_TIMEOUT_S
        if self.error:
            raise self.error
        return self.answer


@pytest.fixture
def coordinator(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()

    def request(client: CoordinatorClient, method: str, path: str, body: Any = None) -> Any:
        return recorder(client, method, path, body)

    monkeypatch.setattr(CoordinatorClient, "request", request)
    monkeypatch.setenv("CROSSFEED_SERVER", "http://coordinator.example:8300")
    return recorder


CREATED = {
    "pair": "shop",
    "feeds": ["shop-a-to-b", "shop-b-to-a"],
    "connectors": {"dc-a": "shop-a", "dc-b": "shop-b"},
    "tables": ["public.accounts"],
    "counters": ["accounts.balance"],
    "warnings": [],
    "done": ["connector shop-a on http://x: dc-a topics shop-a.public.<table>"],
}


def test_create_sends_the_local_stacks_defaults_and_the_body_the_api_takes(
    coordinator: Recorder,
) -> None:
    coordinator.answer = CREATED
    result = runner.invoke(
        app,
        ["pair", "create", "shop", "--table", "public.accounts", "--counter", "accounts.balance"],
    )
    assert result.exit_code == 0, result.output
    [(method, path, body)] = coordinator.calls
    assert (method, path) == ("POST", "/v1/pairs")
    assert body["a_database"] == SOURCE_URI and body["b_database"] == URI
    assert body["connect_a"] == f"http://127.0.0.1:{REST_PORT}"
    assert body["connect_b"] == f"http://127.0.0.1:{REST_PORT_B}"
    assert (body["a_cluster"], body["b_cluster"]) == ("dc-a", "dc-b")
    assert body["tables"] == ["public.accounts"] and body["counters"] == ["accounts.balance"]
    assert body["allow_unsafe"] is False and body["all_tables"] is False
    PairRequest.model_validate(body)  # the server's model takes it as it is
    assert "shop-a-to-b and shop-b-to-a" in result.output
    assert "connector shop-a" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "name the tables"),
        (["--table", "public.a", "--all-tables"], "name the tables"),
        (["--all-tables", "--snapshot", "never"], "--snapshot takes initial or no_data"),
    ],
)
def test_create_refuses_what_needs_no_database_in_one_line(
    coordinator: Recorder, args: list[str], message: str
) -> None:
    result = runner.invoke(app, ["pair", "create", "shop", *args])
    assert result.exit_code == 1
    assert message in result.output
    assert coordinator.calls == []


def test_a_refusal_prints_one_error_line_per_finding(coordinator: Recorder) -> None:
    findings = [
        "pair shop refused: 2 finding(s) (--allow-unsafe goes on past ...)",
        "dc-a: public.users: unique index users_email_key besides the primary key (email)",
        "dc-b: public.orders: key column id is generated on both sides",
    ]
    coordinator.error = ApiError("\n".join(findings), 400, "pair_refused")
    result = runner.invoke(app, ["pair", "create", "shop", "--all-tables"], terminal_width=300)
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 3
    assert all(line.startswith("error: ") for line in lines)
    assert "users_email_key" in lines[1] and "generated on both sides" in lines[2]


def test_status_and_remove_ask_with_the_connect_urls(coordinator: Recorder) -> None:
    coordinator.answer = {
        "pair": "shop",
        "directions": [
            {
                "feed": "shop-a-to-b",
                "source": "dc-a",
                "state": "normal",
                "consistency_ts_us": 1_700_000_000_000_000,
                "lag_s": 0.4,
                "last_error": None,
            },
            {"feed": "shop-b-to-a", "state": "missing"},
        ],
        "connectors": [
            {"connector": "shop-a", "side": "dc-a", "state": "RUNNING", "tasks": ["RUNNING"]}
        ],
        "tables": ["public.accounts"],
        "counters": [],
        "findings": ["dc-b: public.accounts: unique index x besides the primary key (y)"],
    }
    result = runner.invoke(
        app, ["pair", "status", "shop", "--connect-a", "http://ca:8083"], terminal_width=300
    )
    assert result.exit_code == 0, result.output
    method, path, _ = coordinator.calls[-1]
    query = parse_qs(urlparse(path).query)
    assert (method, urlparse(path).path) == ("GET", "/v1/pairs/shop")
    assert query["connect_a"] == ["http://ca:8083"]
    assert query["connect_b"] == [f"http://127.0.0.1:{REST_PORT_B}"]
    assert "shop-a-to-b: normal" in result.output and "lag 0.4s" in result.output
    assert "shop-b-to-a: missing" in result.output
    assert "unique index x" in result.output

    coordinator.answer = {
        "pair": "shop",
        "removed": ["feed shop-a-to-b", "connector shop-a on http://ca:8083"],
        "left_behind": ["dc-a (h:1/db): replication slot crossfeed_shop_a: SELECT ..."],
    }
    result = runner.invoke(app, ["pair", "remove", "shop", "--drop-hidden"], terminal_width=300)
    assert result.exit_code == 0, result.output
    method, path, _ = coordinator.calls[-1]
    assert method == "DELETE"
    assert parse_qs(urlparse(path).query)["drop_hidden"] == ["true"]
    assert "removed feed shop-a-to-b" in result.output
    assert "left behind:" in result.output and "crossfeed_shop_a" in result.output
    runner.invoke(app, ["pair", "remove", "shop"])
    assert "drop_hidden" not in coordinator.calls[-1][1]


def test_crossfeed_status_points_at_pair_status_for_each_pair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def feed(name: str, pair_name: str | None) -> dict[str, Any]:
        return {
            "name": name,
            "state": "normal",
            "tasks": [{"task": f"{name}/0", "owner": None}],
            "resolved_ts_us": 0,
            "checkpoint_ts_us": 0,
            "consistency_ts_us": 0,
            "lag_s": None,
            "last_error": None,
            "pair": pair_name,
        }

    answers = {
        "/v1/status": [
            feed("shop-a-to-b", "shop"),
            feed("shop-b-to-a", "shop"),
            feed("orders", None),
        ],
        "/v1/ha/status": {"leader": "c1", "epoch": 1, "instance_id": "c1"},
    }

    def request(client: CoordinatorClient, method: str, path: str, body: Any = None) -> Any:
        return answers[path]

    monkeypatch.setattr(CoordinatorClient, "request", request)
    result = runner.invoke(app, ["status"], terminal_width=300)
    assert result.exit_code == 0, result.output
    pair_lines = [line for line in result.output.splitlines() if line.startswith("pair ")]
    assert pair_lines == [
        "pair shop: shop-a-to-b and shop-b-to-a; connectors and schema findings: "
        "crossfeed pair status shop"
    ]
