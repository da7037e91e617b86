"""deploy/observability: alert rules and dashboards use only registered metrics, and each
alert has its runbook section.
"""

from __future__ import annotations

import json
import re

import pytest

from tests.support.deploy_files import (
    DASHBOARDS,
    DEPLOY,
    METRIC_NAME,
    RUNBOOK,
    alert_rules,
    dashboard_exprs,
    promql_problems,
    registered_metrics,
    strings_in,
)

pytestmark = pytest.mark.unit


# -- observability ----------------------------------------------------------------------------


def test_alert_rules_use_only_registered_metrics():
    rules = alert_rules()
    assert rules
    for rule in rules:
        assert not promql_problems(rule["expr"]), (rule["alert"], promql_problems(rule["expr"]))
        for text in strings_in(rule.get("annotations", {})):
            unknown = set(METRIC_NAME.findall(text)) - set(registered_metrics())
            assert not unknown, (rule["alert"], unknown)


def test_alert_rules_are_complete_and_documented():
    rules = alert_rules()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    readme = (DEPLOY / "README.md").read_text()
    for rule in rules:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        annotations = rule["annotations"]
        assert {"summary", "description", "runbook", "runbook_url"} <= set(annotations)
        # the runbook_url is the alert's own section of docs/runbook.md
        page, _, anchor = annotations["runbook_url"].partition("#")
        assert page == "docs/runbook.md" and anchor == rule["alert"].lower(), rule["alert"]
        assert f"\n### {rule['alert']}\n" in RUNBOOK.read_text(), rule["alert"]
        assert re.fullmatch(r"\d+[smhd]", rule.get("for", "0m")), rule["alert"]
        assert rule["alert"] in readme, f"deploy/README.md does not explain {rule['alert']}"
    exprs = " ".join(rule["expr"] for rule in rules)
    for needed in (
        "crossfeed_puller_lag_seconds",  # lag too high
        "crossfeed_puller_resolved_timestamp_seconds",  # resolved_ts stuck
        "crossfeed_puller_feed_error",  # feed in error
        "crossfeed_coordinator_role",  # no leader
        "crossfeed_puller_dlq_records_total",  # DLQ growing
        "crossfeed_sink_dlq_records_total",
        "crossfeed_puller_checkpoint_timestamp_seconds",  # the target behind
        "crossfeed_puller_failed_transactions_total",  # transactions failing
    ):
        assert needed in exprs


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_uses_only_registered_metrics(path):
    dashboard = json.loads(path.read_text())
    exprs = dashboard_exprs(dashboard)
    assert exprs
    for expr in exprs:
        assert not promql_problems(expr), (expr, promql_problems(expr))
    text = " ".join(strings_in(dashboard))
    assert set(METRIC_NAME.findall(text)) <= set(registered_metrics())
    used = set(METRIC_NAME.findall(" ".join(exprs)))
    for needed in (
        "crossfeed_puller_records_total",
        "crossfeed_sink_events_total",
        "crossfeed_puller_lag_seconds",
        "crossfeed_puller_lag_records",
        "crossfeed_puller_dlq_records_total",
        "crossfeed_puller_loop_dropped_records_total",
        "crossfeed_coordinator_consistency_timestamp_seconds",
        "crossfeed_puller_checkpoint_timestamp_seconds",
        "crossfeed_puller_offset_syncs_total",
        "crossfeed_puller_resolved_timestamp_seconds",
        "crossfeed_coordinator_role",
        "crossfeed_coordinator_failovers_total",
        "crossfeed_puller_tasks",
    ):
        assert needed in used, f"the dashboard shows no {needed}"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_is_importable(path):
    dashboard = json.loads(path.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    ids = []
    panels = list(dashboard["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        ids.append(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
    assert len(ids) == len(set(ids))
