"""The deployment files parse, and each checker of tests/support/deploy_files.py rejects a
made-up sample (so the other test_deploy_* tests can fail).
"""

from __future__ import annotations

import json

import pytest
import yaml

import crossfeed
from tests.support.deploy_files import (
    ALERTS,
    COMPOSE,
    DASHBOARDS,
    DEPLOY,
    DOCKERFILE,
    K8S,
    allowed_env,
    crossfeed_commands,
    env_problems,
    image_problem,
    k8s_kind,
    load_docs,
    parse_crossfeed,
    promql_problems,
    registered_metrics,
    shell_crossfeed_commands,
    yaml_files,
)

pytestmark = pytest.mark.unit


# -- everything parses ------------------------------------------------------------------------


def test_deploy_files_exist():
    for path in (DOCKERFILE, COMPOSE, ALERTS, K8S / "kustomization.yaml", DEPLOY / "README.md"):
        assert path.is_file(), path
    assert DASHBOARDS, "no Grafana dashboard JSON under deploy/observability/grafana"


@pytest.mark.parametrize("path", yaml_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path):
    docs = load_docs(path)
    assert docs, f"{path} holds no YAML document"
    for doc in docs:
        assert isinstance(doc, dict), f"{path}: a document is not a mapping"


def test_yaml_embedded_in_configmaps_parses():
    for cm in k8s_kind("ConfigMap"):
        for key, value in cm.get("data", {}).items():
            if key.endswith((".yaml", ".yml")):
                assert isinstance(yaml.safe_load(value), dict), (cm["metadata"]["name"], key)


@pytest.mark.parametrize("path", sorted(DEPLOY.rglob("*.json")), ids=lambda p: p.name)
def test_every_json_file_parses(path):
    assert isinstance(json.loads(path.read_text()), dict)


# -- the checkers reject made-up input --------------------------------------------------------


def test_cli_checker_accepts_real_commands_and_rejects_made_up_ones():
    ok = parse_crossfeed(
        ["--log-format", "json", "puller", "run", "--feed", "f", "--metrics-port", "9"]
    )
    assert ok.path == ("puller", "run")
    assert ok.params["metrics_port"] == 9
    assert ok.root_params["log_format"] == "json"
    assert parse_crossfeed(["puller", "run"], complete=False).path == ("puller", "run")
    for bad in (
        ["pullr", "run"],  # no such subcommand
        ["puller", "run", "--feed", "f", "--made-up-flag"],  # no such flag
        ["puller", "run", "--feed", "f", "--metrics-port", "$(PORT)"],  # not an int
        ["puller", "run"],  # --feed is required
        ["puller"],  # a group, no subcommand
        ["coordinator", "run", "--feed", "f"],  # a flag of another command
    ):
        with pytest.raises(ValueError):
            parse_crossfeed(bad)


def test_shell_scripts_are_searched_for_crossfeed_commands():
    script = "for i in 1 2; do crossfeed changefeed get f || crossfeed changefeed create x; done"
    assert shell_crossfeed_commands(script) == [
        ["changefeed", "get", "f"],
        ["changefeed", "create", "x"],
    ]
    entrypoint = ["/usr/bin/tini", "--", "crossfeed-sorter-entrypoint"]
    assert crossfeed_commands(entrypoint, ["sorter", "run"]) == [["sorter", "run"]]
    assert crossfeed_commands(entrypoint, ["spark-class", "org.example.Main"]) is None
    assert crossfeed_commands(["java"], ["-jar", "x"]) is None


def test_env_checker_rejects_a_made_up_variable():
    sample = yaml.safe_load("environment: {CROSSFEED_SERVER: x, CROSSFEED_MADE_UP: y, OTHER: z}")
    assert env_problems(sample["environment"]) == [
        "CROSSFEED_MADE_UP is not a crossfeed setting (crossfeed/config/settings.py)"
    ]
    assert not env_problems(["CROSSFEED_COORDINATOR__FAILOVER_TIMEOUT_S", "CROSSFEED_CONFIG"])
    assert env_problems(["CROSSFEED_COORDINATOR__MADE_UP"])
    assert "CROSSFEED_METRICS_PORT" in allowed_env()


def test_metric_checker_rejects_made_up_metrics_and_labels():
    assert not promql_problems('sum by (feed) (rate(crossfeed_puller_records_total{feed="x"}[5m]))')
    assert promql_problems("rate(crossfeed_puller_made_up_total[5m])") == [
        "crossfeed_puller_made_up_total is not a registered metric"
    ]
    assert promql_problems("max by (color) (crossfeed_coordinator_role)")
    assert promql_problems("max(crossfeed_puller_tasks{topic='x'})")  # tasks are per feed only
    assert promql_problems("sum(rate(crossfeed_puller_records_total[5m])")


def test_image_checker_rejects_unpinned_and_unknown_images():
    assert not image_problem(f"crossfeed/puller:{crossfeed.__version__}")
    assert not image_problem("postgres:17.6-bookworm")
    assert not image_problem("prom/prometheus@sha256:" + "0" * 64)
    for bad in ("postgres", "postgres:latest", "crossfeed/pullr:0.1.0", "crossfeed/puller:9.9"):
        assert image_problem(bad), bad


def test_registry_lists_the_services_metrics():
    names = registered_metrics()
    for name in (
        "crossfeed_puller_records_total",
        "crossfeed_puller_lag_seconds",
        "crossfeed_puller_checkpoint_timestamp_seconds",
        "crossfeed_sink_feed_checkpoint_timestamp_seconds",
        "crossfeed_coordinator_role",
        "crossfeed_coordinator_consistency_timestamp_seconds",
    ):
        assert name in names
    assert names["crossfeed_puller_lag_records"] == {"feed", "topic", "partition"}
