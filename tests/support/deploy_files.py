"""Readers and checkers for the deploy tests (tests/unit/deploy/).

The deployment files under deploy/ (docs/design.md): they parse, and they reference only
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

import functools
import json
import os
import re
import shlex
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
from crossfeed.cli.main import app
from crossfeed.config import Settings, load_settings
from crossfeed.feeds import FeedSpec, parse_feed
from crossfeed.wire import codec

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
IMAGES = (*SERVICES, "connect")
"""Our images: one per service, and Kafka Connect with Debezium (not a crossfeed service)."""
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
    if match["target"] not in IMAGES or match["target"] not in dockerfile():
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
