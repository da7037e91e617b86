"""deploy/compose: images, commands, dependencies, ports and observability files."""

from __future__ import annotations

import base64
import re

import pytest
import yaml

from crossfeed.feeds import FeedSpec
from tests.support.deploy_files import (
    ALERTS,
    COMPOSE_DIR,
    DEPLOY,
    DOCKERFILE,
    OBSERVABILITY,
    ROOT,
    compose,
    compose_crossfeed,
    compose_env,
    compose_file,
    compose_mounts,
    compose_services,
    compose_target,
    env_problems,
    feed_of,
    image_of,
    image_problem,
    metrics_port,
    run_invocation,
    validated_settings,
)

pytestmark = pytest.mark.unit


# -- compose ----------------------------------------------------------------------------------


def test_compose_images_are_ours_or_pinned():
    for name, service in compose_services().items():
        assert "image" in service, f"compose service {name} names no image"
        assert not image_problem(service["image"]), (name, image_problem(service["image"]))
        if compose_target(service):
            build = service.get("build")
            assert build, f"{name}: our image must be buildable here (build:)"
            assert (COMPOSE_DIR / build["context"]).resolve() == ROOT
            assert (ROOT / build["dockerfile"]).resolve() == DOCKERFILE
            assert build["target"] == compose_target(service), name


def test_compose_kafka_matches_the_project_and_the_config():
    pom = (DEPLOY / "maven" / "kafka" / "pom.xml").read_text()
    kafka_version = re.search(r"<kafka.version>(.+)</kafka.version>", pom)[1]
    kafkas = {n: s for n, s in compose_services().items() if s["image"].startswith("apache/kafka:")}
    brokers = {n: s for n, s in kafkas.items() if "CLUSTER_ID" in compose_env(s)}
    assert len(brokers) == 2, "two data centers, one KRaft cluster each"
    ids = [compose_env(s)["CLUSTER_ID"] for s in brokers.values()]
    assert len(set(ids)) == 2, "each data center needs its own cluster.id (provenance)"
    for cluster_id in ids:
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, cluster_id
    for service in kafkas.values():
        assert service["image"] == f"apache/kafka:{kafka_version}"
    config = yaml.safe_load((COMPOSE_DIR / "crossfeed.yaml").read_text())
    servers = [v for k, v in config.items() if k.endswith(".bootstrap.servers")]
    assert len(servers) == 2
    for server in servers:
        host, port = server.split(":")
        assert host in brokers, f"{server}: no compose service {host}"
        listeners = compose_env(brokers[host])["KAFKA_LISTENERS"]
        assert f"://:{port}" in listeners, f"{server}: kafka {host} does not listen on {port}"


def test_compose_dependencies_volumes_and_healthchecks_exist():
    services = compose_services()
    conditions = {"service_started", "service_healthy", "service_completed_successfully"}
    for name, service in services.items():
        depends = service.get("depends_on", {})
        depends = (
            {d: {"condition": "service_started"} for d in depends}
            if isinstance(depends, list)
            else depends
        )
        for dep, spec in depends.items():
            assert dep in services, f"{name} depends on unknown {dep}"
            assert spec["condition"] in conditions
            if spec["condition"] == "service_healthy":
                target = compose_target(services[dep])
                has_check = "healthcheck" in services[dep] or (
                    target and image_of(target).healthcheck
                )
                assert has_check, f"{name} waits for {dep} to be healthy; it has no healthcheck"
        for container, host in compose_mounts(service).items():
            assert host.exists(), f"{name}: mounts {host} (missing) at {container}"
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if not source.startswith((".", "/")):
                assert source in compose().get("volumes", {}), f"{name}: volume {source}"


def test_compose_commands_are_real_crossfeed_commands():
    seen = set()
    for name, service in compose_services().items():
        for invocation in compose_crossfeed(service):  # raises ValueError naming the problem
            seen.add(invocation.path)
        assert not env_problems(compose_env(service)), (name, env_problems(compose_env(service)))
    for path in (("coordinator", "run"), ("puller", "run"), ("sink", "run"), ("sorter", "run")):
        assert path in seen
    assert ("changefeed", "create") in seen


def test_compose_runs_two_coordinators_and_the_feeds_it_creates(tmp_path, monkeypatch):
    services = compose_services()
    coordinators = [s for s in services.values() if compose_target(s) == "coordinator"]
    assert len([s for s in coordinators if run_invocation(compose_crossfeed(s))]) == 2
    feeds: dict[str, FeedSpec] = {}
    for name, service in services.items():
        env = compose_env(service)
        if "CROSSFEED_CONFIG" in env:
            config = compose_file(service, env["CROSSFEED_CONFIG"])
            assert config, f"{name}: CROSSFEED_CONFIG {env['CROSSFEED_CONFIG']} is not mounted"
            settings = validated_settings(config.read_text(), env, tmp_path, monkeypatch)
            feed_dirs = [h for h in compose_mounts(service).values() if h.is_dir()]
            for path in [p for d in feed_dirs for p in d.glob("*.yaml")]:
                spec = feed_of(path.read_text(), str(path))
                settings.cluster(spec.source)  # raises ConfigError for an unknown alias
                if spec.sink.cluster:
                    settings.cluster(spec.sink.cluster)
                feeds[spec.name] = spec
        for invocation in compose_crossfeed(service):
            feed_file = invocation.params.get("feed_file")
            if feed_file:
                assert compose_file(service, feed_file), f"{name}: {feed_file} is not mounted"
    for name, service in services.items():
        run = run_invocation(compose_crossfeed(service))
        if run and "feed" in run.params:
            assert run.params["feed"] in feeds, f"{name} runs feed {run.params['feed']!r}: no file"


def test_compose_metrics_ports_match_healthchecks_and_scrape_targets():
    prometheus = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    targets = {
        target
        for job in prometheus["scrape_configs"]
        for sc in job.get("static_configs", [])
        for target in sc["targets"]
    }
    for job in prometheus["scrape_configs"]:
        if job["job_name"].startswith("crossfeed-"):
            # only running services are targets: names from Docker's DNS, never a static
            # list (a service outside the started profiles would be down for ever)
            assert "static_configs" not in job, job["job_name"]
            (relabel,) = job["relabel_configs"]
            assert relabel["source_labels"] == ["__meta_dns_name"]
            assert relabel["target_label"] == "instance"
        for sd in job.get("dns_sd_configs", []):
            assert sd["type"] == "A"
            targets |= {f"{name}:{sd['port']}" for name in sd["names"]}
            assert relabel["replacement"] == f"${{1}}:{sd['port']}"
    expected = set()
    for name, service in compose_services().items():
        run = run_invocation(compose_crossfeed(service))
        if run is None:
            continue
        target = compose_target(service)
        assert target
        image = image_of(target)
        env = {**image.env, **compose_env(service)}
        port = metrics_port(run, env, None)
        assert port and port != "0", f"{name}: a fixed metrics port is needed to scrape it"
        check = service.get("healthcheck", {}).get("test") or ["CMD", *(image.healthcheck or [])]
        assert check[1] == "crossfeed-healthcheck", name
        check_port = check[2] if len(check) > 2 else env.get("CROSSFEED_METRICS_PORT")
        assert check_port == port, f"{name}: healthcheck on {check_port}, metrics on {port}"
        expected.add(f"{service.get('hostname', name)}:{port}")
    crossfeed_targets = {t for t in targets if not t.startswith("localhost:")}
    assert crossfeed_targets == expected


def test_compose_observability_files_exist():
    services = compose_services()
    prometheus_mounts = compose_mounts(services["prometheus"])
    assert ALERTS.resolve() in prometheus_mounts.values()
    grafana_mounts = compose_mounts(services["grafana"])
    assert (OBSERVABILITY / "grafana").resolve() in grafana_mounts.values()
