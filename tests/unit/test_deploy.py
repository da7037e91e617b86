"""The deployment files under deploy/ (docs/design.md): they parse, and they reference only
images, commands, flags, settings and metrics that exist.

Static checks only (no Docker engine, no cluster): the Dockerfile is read stage by stage,
every ``crossfeed`` command line in the Dockerfile, compose and Kubernetes files is parsed
by the real CLI (typer/click, without running it), every ``CROSSFEED_*`` variable must be
a field of :class:`crossfeed.config.Settings`, every ``crossfeed_*`` metric in the
dashboard and alert rules must be registered by the services' metrics modules, and the
metrics port is the same in commands, probes, healthchecks and scrape configurations.
Each checker is also shown to reject a made-up sample, so these tests can fail.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase
from pydantic import BaseModel

import crossfeed
from crossfeed import httpserve
from crossfeed.cli.main import app
from crossfeed.config import Settings, load_settings
from crossfeed.feeds import FeedSpec, parse_feed
from crossfeed.wire import codec

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCKER = DEPLOY / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
COMPOSE_DIR = DEPLOY / "compose"
COMPOSE = COMPOSE_DIR / "docker-compose.yml"
K8S = DEPLOY / "k8s"
OBSERVABILITY = DEPLOY / "observability"
ALERTS = OBSERVABILITY / "prometheus" / "alerts.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"
DASHBOARDS = sorted((OBSERVABILITY / "grafana").glob("*.json"))
SERVICES = ("puller", "sink", "coordinator", "sorter")
OUR_IMAGE = re.compile(r"^crossfeed/(?P<target>[a-z-]+):(?P<tag>[^:@]+)$")
METRIC_NAME = re.compile(r"\bcrossfeed_[a-z0-9_]*[a-z0-9]\b")
TARGET_LABELS = {"instance", "job", "namespace", "pod", "container", "service", "endpoint"}


def yaml_files() -> list[Path]:
    dirs = (DOCKER, COMPOSE_DIR, K8S, OBSERVABILITY)
    return sorted(p for d in dirs for p in d.rglob("*") if p.suffix in (".yaml", ".yml"))


def load_docs(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


# -- the crossfeed command line -------------------------------------------------------------


@dataclass
class Invocation:
    """``crossfeed ARGV``, parsed by the real CLI."""

    path: tuple[str, ...]  # e.g. ("puller", "run")
    params: dict[str, Any]  # the leaf command's options, e.g. {"feed": "orders", ...}
    root_params: dict[str, Any]  # global options (--config, --log-format)


def parse_crossfeed(argv: list[str], *, complete: bool = True) -> Invocation:
    """Parse ``crossfeed ARGV`` exactly as the command would, without running it.

    Raises ValueError saying what is wrong: an unknown subcommand or flag, a bad value,
    a group without its subcommand, or (``complete``) a missing required option.
    """
    root = typer.main.get_command(app)
    try:
        ctx = root.make_context("crossfeed", list(argv))
        root_params = dict(ctx.params)
        command, path = root, []
        rest = [*ctx._protected_args, *ctx.args]  # typer's own way to read them back
        while hasattr(command, "resolve_command"):  # a group: the next word is a subcommand
            if not rest:
                raise ValueError(f"'crossfeed {' '.join(argv)}' names no subcommand")
            name, sub, rest = command.resolve_command(ctx, rest)
            path.append(name)
            ctx = sub.make_context(name, rest, parent=ctx)
            command = sub
            rest = [*ctx._protected_args, *ctx.args]
        if rest:
            raise ValueError(f"unexpected arguments {rest}")
        return Invocation(tuple(path), dict(ctx.params), root_params)
    except typer.TyperException as err:
        missing = type(err).__name__ == "MissingParameter"
        if missing and not complete:
            return Invocation(tuple(path), {}, root_params)
        raise ValueError(f"'crossfeed {' '.join(argv)}': {err.format_message()}") from None


def shell_crossfeed_commands(script: str) -> list[list[str]]:
    """The ``crossfeed ...`` command lines inside a ``sh -c`` script."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = []
    current: list[str] | None = None
    for token in lexer:
        if current is not None:
            if set(token) <= set("();<>|&") or token in ("do", "done", "then", "fi", "else"):
                commands.append(current)
                current = None
            else:
                current.append(token)
        elif token == "crossfeed":
            current = []
    if current is not None:
        commands.append(current)
    return commands


def crossfeed_commands(entrypoint: list[str], cmd: list[str]) -> list[list[str]] | None:
    """The crossfeed argument lists a container runs, or None if it runs something else.

    ``entrypoint``/``cmd`` as the container runtime sees them (image defaults applied)."""
    argv = [*entrypoint, *cmd]
    if argv[:1] == ["/usr/bin/tini"]:
        argv = argv[argv.index("--") + 1 :] if "--" in argv else argv[1:]
    if argv[:1] == ["crossfeed-sorter-entrypoint"]:  # driver/executor/spark-class, else crossfeed
        argv = argv[1:]
        if argv[:1] in (["driver"], ["executor"], ["spark-class"]):
            return None
        argv = ["crossfeed", *argv]
    if argv[:2] == ["sh", "-c"] or argv[:2] == ["/bin/sh", "-c"]:
        return shell_crossfeed_commands(" ".join(argv[2:]))
    if argv[:1] == ["crossfeed"]:
        return [argv[1:]]
    return None


def metrics_port(invocation: Invocation, env: dict[str, str], default: str | None) -> str | None:
    """The port a service serves /metrics on: --metrics-port, else the env, else the image."""
    if invocation.params.get("metrics_port") is not None:
        return str(invocation.params["metrics_port"])
    return env.get("CROSSFEED_METRICS_PORT", default)


# -- the Dockerfile ---------------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    base: str  # an image reference or the name of an earlier stage
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None
    user: str | None = None
    healthcheck: list[str] | None = None
    env: dict[str, str] = field(default_factory=dict)
    copies: list[tuple[list[str], str, str | None]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


def exec_form(text: str) -> list[str]:
    text = text.strip()
    if text.startswith("["):
        value = json.loads(text)
        assert isinstance(value, list)
        return [str(v) for v in value]
    return ["/bin/sh", "-c", text]


def parse_dockerfile(text: str) -> dict[str, Stage]:
    """Stages by name (unnamed ones by index) with what the test needs of each."""
    logical: list[str] = []
    buffer = ""
    for raw in text.splitlines():
        if not buffer and raw.lstrip().startswith("#"):
            continue
        line = raw.rstrip()
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        if buffer.strip():
            logical.append(buffer.strip())
        buffer = ""
    args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    stage: Stage | None = None
    for line in logical:
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "ARG" and stage is None:
            name, _, default = rest.partition("=")
            args[name] = default
        elif keyword == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            base = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m[1] or m[2]], words[0])
            name = words[2] if len(words) > 2 and words[1].upper() == "AS" else str(len(stages))
            stage = Stage(name=name, base=base)
            stages[name] = stage
        elif stage is None:
            continue
        elif keyword == "ENTRYPOINT":
            stage.entrypoint, stage.cmd = exec_form(rest), None  # ENTRYPOINT resets CMD
        elif keyword == "CMD":
            stage.cmd = exec_form(rest)
        elif keyword == "USER":
            stage.user = rest
        elif keyword == "HEALTHCHECK":
            _, _, command = rest.partition("CMD ")
            stage.healthcheck = exec_form(command)
        elif keyword == "ENV":
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                stage.env[key] = value
        elif keyword == "COPY":
            words = rest.split()
            source_stage = next(
                (w.split("=", 1)[1] for w in words if w.startswith("--from=")), None
            )
            paths = [w for w in words if not w.startswith("--")]
            stage.copies.append((paths[:-1], paths[-1], source_stage))
        elif keyword == "RUN":
            stage.runs.append(rest)
    return stages


@dataclass
class Image:
    """What a built target runs, after inheritance from its parent stages."""

    entrypoint: list[str]
    cmd: list[str]
    user: str
    healthcheck: list[str] | None
    env: dict[str, str]


def resolve_target(stages: dict[str, Stage], target: str) -> Image:
    chain = []
    name: str | None = target
    while name in stages:
        chain.append(stages[name])
        name = stages[name].base
    entrypoint: list[str] = []
    cmd: list[str] = []
    user, healthcheck, env = "root", None, {}
    for stage in reversed(chain):
        if stage.entrypoint is not None:
            entrypoint, cmd = stage.entrypoint, []
        if stage.cmd is not None:
            cmd = stage.cmd
        user = stage.user or user
        healthcheck = stage.healthcheck or healthcheck
        env = {**env, **stage.env}
    return Image(entrypoint, cmd, user, healthcheck, env)


@functools.cache
def dockerfile() -> dict[str, Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())


def image_of(target: str) -> Image:
    return resolve_target(dockerfile(), target)


def public_image_problem(ref: str) -> str | None:
    """None if ``ref`` is pinned: a tag other than latest, or a digest."""
    if "@sha256:" in ref:
        return None
    name, _, tag = ref.rpartition(":")
    if not name or "/" in tag:
        return f"image {ref!r} has no tag: pin a version (or a digest)"
    if tag == "latest":
        return f"image {ref!r} uses the tag latest: pin a version"
    return None


def our_image_problem(ref: str) -> str | None:
    match = OUR_IMAGE.match(ref)
    if not match:
        return f"{ref!r} is not crossfeed/<target>:<version>"
    if match["target"] not in SERVICES or match["target"] not in dockerfile():
        return f"{ref!r}: deploy/docker/Dockerfile has no target {match['target']!r}"
    if match["tag"] != crossfeed.__version__:
        return f"{ref!r}: tag is not the project version {crossfeed.__version__}"
    return None


def image_problem(ref: str) -> str | None:
    return our_image_problem(ref) if ref.startswith("crossfeed/") else public_image_problem(ref)


# -- settings ---------------------------------------------------------------------------------


@functools.cache
def allowed_env() -> frozenset[str]:
    """``CROSSFEED_*`` variables crossfeed reads: one per Settings field, ``__`` for fields
    of nested sections, plus the few read outside the settings."""
    names = {"CROSSFEED_CONFIG", "CROSSFEED_HOME", codec.SCHEMAS_DIR_ENV}
    prefix = Settings.model_config.get("env_prefix", "")
    delimiter = Settings.model_config.get("env_nested_delimiter") or "__"
    for name, info in Settings.model_fields.items():
        env = (prefix + name).upper()
        names.add(env)
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names.update(f"{env}{delimiter}{sub}".upper() for sub in annotation.model_fields)
    return frozenset(names)


def env_problems(names: Any) -> list[str]:
    return [
        f"{name} is not a crossfeed setting (crossfeed/config/settings.py)"
        for name in names
        if str(name).startswith("CROSSFEED_") and name not in allowed_env()
    ]


def validated_settings(
    config_text: str, env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Settings:
    """Settings a container would load: ``config_text`` as its file, ``env`` on top."""
    path = tmp_path / f"crossfeed-{abs(hash(config_text))}.yaml"
    path.write_text(config_text)
    for name in [n for n in os.environ if n.startswith("CROSSFEED_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        if name.startswith("CROSSFEED_") and name not in ("CROSSFEED_CONFIG", "CROSSFEED_HOME"):
            monkeypatch.setenv(name, value)
    return load_settings(path)


def feed_of(text: str, where: str) -> FeedSpec:
    data = yaml.safe_load(text)
    assert isinstance(data, dict), where
    return parse_feed(data, where)


# -- metrics ----------------------------------------------------------------------------------

METRICS_MODULES = (
    "crossfeed.services.puller.metrics",
    "crossfeed.services.sink.metrics",
    "crossfeed.services.sink.ordered_metrics",
    "crossfeed.services.sorter.metrics",
    "crossfeed.services.coordinator.metrics",
    "crossfeed.translation.metrics",
    "crossfeed.build_info",
)
SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}


@functools.cache
def registered_metrics() -> dict[str, frozenset[str]]:
    """Every crossfeed_* series name the services export, with its label names."""
    import importlib

    modules = [importlib.import_module(name) for name in METRICS_MODULES]
    labels: dict[str, frozenset[str]] = {}
    for module in modules:
        for obj in vars(module).values():
            if isinstance(obj, MetricWrapperBase):
                for family in obj.describe():
                    labels[family.name] = frozenset(obj._labelnames)
    names: dict[str, frozenset[str]] = {}
    for family in REGISTRY.collect():
        if family.name.startswith("crossfeed_"):
            for suffix in SUFFIXES.get(family.type, ("",)):
                names[family.name + suffix] = labels.get(family.name, frozenset())
            if family.type == "histogram":  # a bucket's upper bound
                names[family.name + "_bucket"] |= {"le"}
    return names


def promql_problems(expr: str) -> list[str]:
    """Unknown crossfeed metrics, and labels the expression's metrics do not have."""
    known = registered_metrics()
    used = set(METRIC_NAME.findall(expr))
    problems = [f"{name} is not a registered metric" for name in sorted(used - set(known))]
    available = set(TARGET_LABELS).union(*(known.get(name, frozenset()) for name in used))
    labels: set[str] = set()
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        labels.update(label.strip() for label in group.split(",") if label.strip())
    for selector in re.findall(r"\{([^}]*)\}", expr):
        labels.update(re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", selector))
    problems += [f"label {label!r} is on none of {sorted(used)}" for label in labels - available]
    if expr.count("(") != expr.count(")") or expr.count("[") != expr.count("]"):
        problems.append(f"unbalanced brackets in {expr!r}")
    return problems


def strings_in(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings_in(value)


def alert_rules() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]
    ]


def dashboard_exprs(dashboard: dict[str, Any]) -> list[str]:
    exprs = []
    panels = list(dashboard["panels"])
    while panels:
        panel = panels.pop()
        panels.extend(panel.get("panels", []))
        exprs += [target["expr"] for target in panel.get("targets", [])]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query.get("query", ""))
        elif variable.get("type") == "query":
            exprs.append(str(query))
    return exprs


# -- compose ----------------------------------------------------------------------------------


@functools.cache
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


def compose_services() -> dict[str, dict[str, Any]]:
    return compose()["services"]


def compose_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): str(v) for k, v in env.items()}


def compose_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of the service's bind mounts."""
    mounts = {}
    for volume in service.get("volumes", []):
        host, container = volume.split(":")[:2]
        if host.startswith((".", "/")):
            mounts[container] = (COMPOSE_DIR / host).resolve()
    return mounts


def compose_file(service: dict[str, Any], path: str) -> Path | None:
    """The host file a bind mount puts at ``path`` in the container, if any."""
    for container, host in compose_mounts(service).items():
        if path == container and host.is_file():
            return host
        if path.startswith(container.rstrip("/") + "/") and host.is_dir():
            candidate = host / path[len(container.rstrip("/")) + 1 :]
            if candidate.is_file():
                return candidate
    return None


def compose_target(service: dict[str, Any]) -> str | None:
    match = OUR_IMAGE.match(service.get("image", ""))
    return match["target"] if match else None


def compose_crossfeed(service: dict[str, Any]) -> list[Invocation]:
    target = compose_target(service)
    if target is None:
        return []
    image = image_of(target)
    entrypoint = service.get("entrypoint", image.entrypoint)
    entrypoint = entrypoint if isinstance(entrypoint, list) else shlex.split(entrypoint)
    if "entrypoint" in service and "command" not in service:
        cmd: list[str] = []
    else:
        cmd = service.get("command", image.cmd)
        cmd = cmd if isinstance(cmd, list) else shlex.split(cmd)
    commands = crossfeed_commands(entrypoint, [str(c) for c in cmd]) or []
    return [parse_crossfeed(argv) for argv in commands]


def run_invocation(invocations: list[Invocation]) -> Invocation | None:
    """The ``<service> run`` among the invocations, if the container runs a service."""
    return next((i for i in invocations if len(i.path) == 2 and i.path[1] == "run"), None)


# -- kubernetes -------------------------------------------------------------------------------


@functools.cache
def k8s_objects() -> list[dict[str, Any]]:
    return [doc for path in sorted(K8S.rglob("*.yaml")) for doc in load_docs(path)]


def k8s_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for doc in k8s_objects() if doc.get("kind") == kind]


def configmap(name: str) -> dict[str, str]:
    found = [cm for cm in k8s_kind("ConfigMap") if cm["metadata"]["name"] == name]
    assert found, f"ConfigMap {name} is referenced but not defined in deploy/k8s"
    return found[0]["data"]


def pod_templates() -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(workload name, pod metadata, pod spec) of every Deployment and Job."""
    for kind in ("Deployment", "Job"):
        for obj in k8s_kind(kind):
            template = obj["spec"]["template"]
            yield f"{kind}/{obj['metadata']['name']}", template["metadata"], template["spec"]


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """Literal environment of a container: envFrom ConfigMaps, then env (fieldRef/secretKeyRef
    values become placeholders)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(configmap(source["configMapRef"]["name"]))
    for var in container.get("env", []):
        env[var["name"]] = str(var.get("value", f"<{var['name']}>"))
    return env


def k8s_crossfeed(container: dict[str, Any]) -> list[Invocation]:
    match = OUR_IMAGE.match(container["image"])
    if not match:
        return []
    image = image_of(match["target"])
    entrypoint = container.get("command", image.entrypoint)
    cmd = container.get("args", [] if "command" in container else image.cmd)
    commands = crossfeed_commands([str(c) for c in entrypoint], [str(c) for c in cmd]) or []
    return [parse_crossfeed(argv) for argv in commands]


def probe_port(probe: dict[str, Any], ports: dict[str, int]) -> str | None:
    if "exec" in probe:
        command = probe["exec"]["command"]
        assert command[0] == "crossfeed-healthcheck", command
        return str(command[1]) if len(command) > 1 else None
    for kind in ("httpGet", "tcpSocket", "grpc"):
        if kind in probe:
            port = probe[kind]["port"]
            return str(ports.get(port, port))
    return None


def mounted_file(spec: dict[str, Any], container: dict[str, Any], path: str) -> str | None:
    """Content of ``path`` inside the container if a ConfigMap volume provides it."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        prefix = mount["mountPath"].rstrip("/") + "/"
        volume = volumes.get(mount["name"], {})
        if path.startswith(prefix) and "configMap" in volume:
            return configmap(volume["configMap"]["name"]).get(path[len(prefix) :])
    return None


# == tests ====================================================================================

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


# -- Dockerfile -------------------------------------------------------------------------------


def test_dockerfile_has_one_target_per_service():
    assert set(SERVICES) <= set(dockerfile())


@pytest.mark.parametrize("target", SERVICES)
def test_dockerfile_target_runs_its_crossfeed_service(target):
    image = image_of(target)
    commands = crossfeed_commands(image.entrypoint, image.cmd)
    assert commands, f"target {target}: {image.entrypoint} {image.cmd} does not run crossfeed"
    (argv,) = commands
    # --feed is the operator's to give (compose, k8s); everything else must parse.
    assert parse_crossfeed(argv, complete=False).path == (target, "run")
    if target != "sorter":
        assert image.entrypoint == ["crossfeed"]


def test_sorter_entrypoint_hands_everything_else_to_crossfeed():
    image = image_of("sorter")
    script = (DOCKER / "sorter" / "entrypoint.sh").read_text()
    assert image.entrypoint == ["/usr/bin/tini", "--", "crossfeed-sorter-entrypoint"]
    assert re.search(r'^\s*\*\)\s*\n\s*exec crossfeed "\$@"', script, re.M)
    for role in ("driver)", "executor)"):
        assert role in script
    copied = {dest for _, dest, _ in dockerfile()["sorter"].copies}
    assert "/usr/local/bin/crossfeed-sorter-entrypoint" in copied
    assert "/opt/crossfeed/sorter_main.py" in copied
    assert "openjdk-17-jre-headless" in " ".join(dockerfile()["sorter"].runs)


@pytest.mark.parametrize("target", SERVICES)
def test_dockerfile_target_runs_as_non_root_with_a_healthcheck(target):
    image = image_of(target)
    uid = image.user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"{target}: USER {image.user} (numeric, not root)"
    assert image.healthcheck and image.healthcheck[0] == "crossfeed-healthcheck", target
    port = image.healthcheck[1] if len(image.healthcheck) > 1 else None
    assert port == image.env["CROSSFEED_METRICS_PORT"], "healthcheck port != metrics port"
    assert not env_problems(image.env)


def test_dockerfile_base_images_are_pinned_and_python_311():
    stages = dockerfile()
    external = [s.base for s in stages.values() if s.base not in stages]
    assert external
    for ref in external:
        assert not public_image_problem(ref), ref
    assert stages["base"].base.startswith("python:3.11-")


def test_dockerfile_installs_with_the_constraints_and_copies_what_exists():
    stages = dockerfile()
    runs = " ".join(run for stage in stages.values() for run in stage.runs)
    assert "--constraint /opt/crossfeed/build/constraints.txt" in runs
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    allowed = [line[1:].rstrip("/") for line in ignore if line.startswith("!")]
    for stage in stages.values():
        for sources, _, from_stage in stage.copies:
            if from_stage:
                assert from_stage in stages
                continue
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: no such path"
                assert any(source == a or source.startswith(a + "/") for a in allowed), (
                    f"COPY {source} is excluded by Dockerfile.dockerignore"
                )
    # The wheel ships the Avro schemas (crossfeed/schemas -> schemas/, copied with it):
    # no image points the codec elsewhere.
    assert "schemas" in stages["wheel"].copies[-1][0]
    assert all(codec.SCHEMAS_DIR_ENV not in image_of(t).env for t in SERVICES)


@pytest.mark.parametrize(
    "target, extra",
    [("puller", None), ("sink", "postgres"), ("coordinator", "coordinator"), ("sorter", "sorter")],
)
def test_each_image_installs_only_its_services_extra(target, extra):
    # `requirements.py EXTRA | pip install`: the build must fail when the script does.
    assert '["/bin/bash", "-o", "pipefail", "-c"]' in DOCKERFILE.read_text()
    stages = dockerfile()
    installs = [" ".join(run.split()) for run in stages["base"].runs if "requirements.py" in run]
    assert installs == [
        "python /opt/crossfeed/build/requirements.py "
        "| pip install --constraint /opt/crossfeed/build/constraints.txt --requirement /dev/stdin"
    ]
    extras = [
        run.split("requirements.py ", 1)[1].split()[0]
        for run in stages[target].runs
        if "requirements.py" in run
    ]
    assert extras == ([extra] if extra else [])
    # Installed as root, run as the unprivileged user.
    assert image_of(target).user == "10001:10001"


def test_sorter_image_spark_matches_the_project():
    pom = (DEPLOY / "maven" / "spark" / "pom.xml").read_text()
    spark_version = re.search(r"<spark.version>(.+)</spark.version>", pom)[1]
    pinned = dict(
        line.split("==")
        for line in (ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    )
    assert pinned["pyspark"] == spark_version
    sorter = image_of("sorter")
    assert sorter.env["SPARK_HOME"].startswith("/usr/local/lib/python3.11/site-packages/")


def test_healthcheck_script_follows_healthz(monkeypatch):
    """The script the images, compose and probes use, against the services' own server."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("healthcheck", DOCKER / "healthcheck.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    state = {"state": "running"}
    server = httpserve.serve(lambda: dict(state))
    try:
        port = str(server.server_address[1])
        assert module.main(["crossfeed-healthcheck", port]) == 0
        monkeypatch.setenv("CROSSFEED_METRICS_PORT", port)
        assert module.main(["crossfeed-healthcheck"]) == 0
        state["state"] = "failed"  # /healthz answers 503
        assert module.main(["crossfeed-healthcheck", port]) == 1
    finally:
        server.shutdown()
        server.server_close()
    assert module.main(["crossfeed-healthcheck", port]) == 1  # nothing listens


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


def test_kubernetes_coordinators_require_their_api_token_from_a_secret() -> None:
    """A coordinator pod listens on its pod IP, which it refuses without a token."""
    docs = load_docs(Path(__file__).resolve().parents[2] / "deploy" / "k8s" / "coordinator.yaml")
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
