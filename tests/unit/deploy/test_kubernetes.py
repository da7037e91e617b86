"""deploy/k8s: kustomizations, images, commands, probes, feeds, secrets."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from crossfeed.config import Settings
from tests.support.deploy_files import (
    ALERTS,
    DEPLOY,
    K8S,
    configmap,
    container_env,
    dockerfile,
    env_problems,
    feed_of,
    image_of,
    image_problem,
    k8s_crossfeed,
    k8s_kind,
    load_docs,
    metrics_port,
    mounted_file,
    parse_crossfeed,
    pod_templates,
    probe_port,
    run_invocation,
    validated_settings,
)

pytestmark = pytest.mark.unit


# -- kubernetes -------------------------------------------------------------------------------


def test_kustomizations_list_every_manifest():
    for directory in (K8S, K8S / "monitoring"):
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
        listed = set(kustomization["resources"])
        present = {p.name for p in directory.glob("*.yaml") if p.name != "kustomization.yaml"}
        assert listed == present, directory
        assert kustomization["namespace"] == "crossfeed"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl (kustomize) not installed")
@pytest.mark.parametrize("directory", [K8S, K8S / "monitoring"], ids=["k8s", "monitoring"])
def test_kustomize_builds(directory):
    result = subprocess.run(
        ["kubectl", "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert all(
        doc["metadata"]["namespace"] == "crossfeed"
        for doc in yaml.safe_load_all(result.stdout)
        if doc["kind"] != "Namespace"
    )


def test_k8s_images_are_ours_or_pinned():
    images = [c["image"] for _, _, spec in pod_templates() for c in spec["containers"]]
    images += [app["spec"]["image"] for app in k8s_kind("SparkApplication")]
    assert images
    for ref in images:
        assert not image_problem(ref), image_problem(ref)


def test_k8s_commands_env_and_probes(tmp_path, monkeypatch):
    seen = set()
    for workload, metadata, spec in pod_templates():
        for container in spec["containers"]:
            where = f"{workload}/{container['name']}"
            env = container_env(container)
            assert not env_problems(env), (where, env_problems(env))
            defined = {var["name"] for var in container.get("env", [])}
            for word in [*container.get("command", []), *container.get("args", [])]:
                for ref in re.findall(r"\$\((\w+)\)", str(word)):
                    assert ref in defined, f"{where}: $({ref}) is not in its env"
            resources = container.get("resources", {})
            assert resources.get("requests") and resources.get("limits"), where
            invocations = k8s_crossfeed(container)
            seen.update(i.path for i in invocations)
            if env.get("CROSSFEED_CONFIG"):
                text = mounted_file(spec, container, env["CROSSFEED_CONFIG"])
                assert text, f"{where}: CROSSFEED_CONFIG {env['CROSSFEED_CONFIG']} not mounted"
                validated_settings(text, env, tmp_path, monkeypatch)
            for invocation in invocations:
                feed_file = invocation.params.get("feed_file")
                if feed_file:
                    assert mounted_file(spec, container, feed_file), f"{where}: {feed_file}"
            run = run_invocation(invocations)
            if run is None:
                continue
            ports = {p["name"]: p["containerPort"] for p in container.get("ports", [])}
            port = metrics_port(run, env, image_of(run.path[0]).env.get("CROSSFEED_METRICS_PORT"))
            assert port == str(ports.get("metrics")), f"{where}: containerPort metrics != {port}"
            annotations = metadata.get("annotations", {})
            assert annotations.get("prometheus.io/port") == port, where
            assert annotations.get("prometheus.io/scrape") == "true", where
            for kind in ("livenessProbe", "readinessProbe"):
                assert kind in container, f"{where} has no {kind}"
            for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                if kind in container and "exec" in container[kind]:
                    assert probe_port(container[kind], ports) == port, f"{where} {kind}"
            if run.path == ("coordinator", "run"):
                assert str(run.params["port"]) == str(ports["rest"]), where
    for path in (("coordinator", "run"), ("puller", "run"), ("sink", "run")):
        assert path in seen
    assert ("changefeed", "create") in seen


def test_k8s_pods_run_as_non_root():
    for workload, _, spec in pod_templates():
        assert spec["securityContext"]["runAsNonRoot"] is True, workload
        for container in spec["containers"]:
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, workload


def test_k8s_feeds_and_configuration_agree(tmp_path, monkeypatch):
    settings = validated_settings(
        configmap("crossfeed-config")["crossfeed.yaml"], {}, tmp_path, monkeypatch
    )
    feeds = {}
    for key, text in configmap("crossfeed-feeds").items():
        spec = feed_of(text, f"ConfigMap crossfeed-feeds/{key}")
        settings.cluster(spec.source)
        if spec.sink.cluster:
            settings.cluster(spec.sink.cluster)
        feeds[spec.name] = spec
    for workload, _, spec in pod_templates():
        for container in spec["containers"]:
            run = run_invocation(k8s_crossfeed(container))
            if run and "feed" in run.params:
                assert run.params["feed"] in feeds, f"{workload}: feed {run.params['feed']}"


def test_k8s_coordinator_runs_two_replicas_behind_a_service_and_a_pdb():
    (deployment,) = [
        d for d in k8s_kind("Deployment") if d["metadata"]["name"].endswith("coordinator")
    ]
    assert deployment["spec"]["replicas"] == 2
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "$(POD_IP)" in container["args"]  # advertised: a standby forwards changes there
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    (service,) = [
        s for s in k8s_kind("Service") if s["metadata"]["name"] == "crossfeed-coordinator"
    ]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (rest,) = service["spec"]["ports"]
    assert rest["port"] == 8300 and ports[rest["targetPort"]] == 8300
    assert Settings.model_fields["server"].default.endswith(":8300")  # the CLI's default
    (pdb,) = k8s_kind("PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["minAvailable"] == 1
    for d in k8s_kind("Deployment"):
        labels = d["spec"]["template"]["metadata"]["labels"]
        assert d["spec"]["selector"]["matchLabels"].items() <= labels.items(), d["metadata"]


def test_k8s_sorter_is_a_spark_application_running_crossfeed_sorter():
    (sorter,) = k8s_kind("SparkApplication")
    spec = sorter["spec"]
    assert sorter["apiVersion"] == "sparkoperator.k8s.io/v1beta2"
    assert spec["type"] == "Python" and spec["mode"] == "cluster"
    main = spec["mainApplicationFile"].removeprefix("local://")
    assert main in {dest for _, dest, _ in dockerfile()["sorter"].copies}
    assert parse_crossfeed(spec["arguments"]).path == ("sorter", "run")
    pom = (DEPLOY / "maven" / "spark" / "pom.xml").read_text()
    assert spec["sparkVersion"] == re.search(r"<spark.version>(.+)</spark.version>", pom)[1]
    driver = spec["driver"]
    env: dict[str, str] = {}
    for source in driver.get("envFrom", []):
        env.update(configmap(source["configMapRef"]["name"]))
    assert not env_problems(env)
    ports = {p["name"]: str(p["containerPort"]) for p in driver["ports"]}
    assert (
        ports["metrics"]
        == env["CROSSFEED_METRICS_PORT"]
        == driver["annotations"]["prometheus.io/port"]
    )
    accounts = {sa["metadata"]["name"] for sa in k8s_kind("ServiceAccount")}
    assert driver["serviceAccount"] in accounts
    volumes = {v["name"] for v in spec["volumes"]}
    for part in (driver, spec["executor"]):
        assert {m["name"] for m in part["volumeMounts"]} <= volumes


def test_k8s_prometheus_rule_equals_the_alert_rules_file():
    (rule,) = k8s_kind("PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(ALERTS.read_text())["groups"]
    (monitor,) = k8s_kind("PodMonitor")
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def test_kubernetes_coordinators_require_their_api_token_from_a_secret() -> None:
    """A coordinator pod listens on its pod IP, which it refuses without a token."""
    docs = load_docs(Path(__file__).resolve().parents[3] / "deploy" / "k8s" / "coordinator.yaml")
    pods = [d for d in docs if d and d.get("kind") == "StatefulSet"] or [
        d for d in docs if d and d.get("kind") == "Deployment"
    ]
    assert pods, "no coordinator workload in deploy/k8s/coordinator.yaml"
    container = pods[0]["spec"]["template"]["spec"]["containers"][0]
    token = {e["name"]: e for e in container["env"]}["CROSSFEED_API_TOKEN"]
    ref = token["valueFrom"]["secretKeyRef"]
    assert ref["name"] and ref["key"] and not ref.get("optional", False)


def _pod_specs(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod specs of a workload (a SparkApplication's driver and executor included)."""
    if doc.get("kind") in ("Deployment", "StatefulSet", "Job"):
        return [doc["spec"]["template"]["spec"]]
    if doc.get("kind") == "SparkApplication":
        spec = doc["spec"]
        return [
            {"volumes": spec.get("volumes", []), **spec[role]} for role in ("driver", "executor")
        ]
    return []


def test_kubernetes_credentials_come_from_a_secret_never_a_configmap() -> None:
    from crossfeed.core.secrets import masked

    workloads = 0
    for path in sorted(K8S.glob("*.yaml")):
        for doc in load_docs(path):
            if doc.get("kind") == "ConfigMap":
                for key, text in doc.get("data", {}).items():
                    parsed = yaml.safe_load(text) if key.endswith(".yaml") else {key: text}
                    if isinstance(parsed, dict):
                        assert masked(parsed) == parsed, f"{path.name}: {key} holds a secret"
            for pod in _pod_specs(doc):
                workloads += 1
                volumes = {v["name"]: v for v in pod.get("volumes", [])}
                assert volumes["credentials"]["secret"]["secretName"] == "crossfeed-credentials"
                mounts = [
                    m for c in pod.get("containers", [pod]) for m in c.get("volumeMounts", [])
                ]
                assert any(m["name"] == "credentials" and m.get("readOnly") for m in mounts), (
                    f"{path.name}: no read-only credentials mount"
                )
    assert workloads >= 6  # coordinator, puller, sink, feed job, sorter driver and executor
