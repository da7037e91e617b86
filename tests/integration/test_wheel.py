"""A package that installs anywhere: the wheel built from the checkout's tracked files,
installed into a fresh virtualenv with its base dependencies only (no extra), runs
``crossfeed --help``, the client library with the shipped Avro schemas, and a mirror feed's
puller against the real clusters (tests/support/wheel.py builds and installs it)."""

from __future__ import annotations

import json
import platform
import subprocess
import tomllib
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from tests.support.verify import flatten, read_many, verify_mirror
from tests.support.wheel import REPO_ROOT, Installed, build_and_install, clean_env, run
from tests.support.workload import produce_mixed

pytestmark = [pytest.mark.integration, pytest.mark.e2e]

# What a plain install must not have: the extras' packages (crossfeed/extras.py).
EXTRA_MODULES = ["pyspark", "pandas", "pyarrow", "psycopg", "fastapi", "uvicorn"]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    if subprocess.run(["git", "rev-parse"], capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: the wheel is built from its tracked files")
    return build_and_install(tmp_path_factory.mktemp("wheel"))


def test_the_wheel_holds_the_package_its_schemas_and_license(installed: Installed):
    # The services ship as crossfeed.services: no generic top-level name in site-packages.
    assert installed.top_level_names() == {"crossfeed"}
    assert "Apache License" in installed.read(".dist-info/licenses/LICENSE")
    metadata = installed.read(".dist-info/METADATA")
    assert "License-Expression: Apache-2.0" in metadata
    (requires,) = [ln for ln in metadata.splitlines() if ln.startswith("Requires-Python: ")]
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert SpecifierSet(requires.split(": ", 1)[1]) == SpecifierSet(declared["requires-python"])
    assert SpecifierSet(declared["requires-python"]).contains(platform.python_version())
    for extra in ("sorter", "postgres", "coordinator", "all"):
        assert f"Provides-Extra: {extra}" in metadata


def test_cli_and_client_library_work_without_extras_or_a_checkout(
    installed: Installed, tmp_path: Path
):
    assert "changefeed" in run([installed.crossfeed, "--help"], tmp_path).stdout
    probe = f"""
import importlib.util, json, sys
from crossfeed.client import ChangeProducer, TimestampedConsumer, row_change
from crossfeed.wire import codec
from crossfeed.wire.changes import Column, Table

accounts = Table("accounts", (Column("id", "long", primary_key=True), Column("balance", "long")))
change = row_change("bank", accounts.insert({{"id": 1, "balance": 100}}))
value = codec.decode("ChangeEvent", change.value)
print(json.dumps({{
    "schemas": str(codec.default_schemas_dir()),
    "records": codec.record_names(),
    "table": value["table"],
    "extras_present": [m for m in {EXTRA_MODULES!r} if importlib.util.find_spec(m)],
    "crossfeed": __import__("crossfeed").__file__,
}}))
"""
    out = json.loads(run([installed.python, "-c", probe], tmp_path).stdout)
    site = str(installed.venv)
    assert out["crossfeed"].startswith(site), "the venv must import its own crossfeed"
    assert out["schemas"].startswith(site)  # shipped in the wheel, no $CROSSFEED_SCHEMAS_DIR
    assert "ChangeEvent" in out["records"]
    assert out["table"] == "accounts"
    assert out["extras_present"] == []


@pytest.mark.parametrize(
    "argv, extra",
    [
        (["sorter", "run", "--feed", "f"], "sorter"),
        (["coordinator", "run"], "coordinator"),
        (["local", "up"], "postgres"),
    ],
)
def test_a_part_started_without_its_extra_names_the_extra(
    installed: Installed, tmp_path: Path, argv: list[str], extra: str
):
    done = subprocess.run(
        [installed.crossfeed, *argv], cwd=tmp_path, env=clean_env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"pip install 'crossfeed[{extra}]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_postgres_sink_without_its_extra_names_the_extra(installed: Installed, tmp_path: Path):
    # Refused before any connection: the clusters named here do not exist.
    (tmp_path / "crossfeed.yaml").write_text(
        "clusters:\n"
        "  dc-a: {bootstrap.servers: 127.0.0.1:9}\n"
        "  dc-b: {bootstrap.servers: 127.0.0.1:9}\n"
    )
    (tmp_path / "ledger.yaml").write_text(
        "name: ledger\nsource: dc-a\nsink-uri: postgresql://me@127.0.0.1:9/db\n"
        "topics: [bank]\nmode: ordered\n"
    )
    argv = ["--config", "crossfeed.yaml", "sink", "run", "--feed", "ledger"]
    done = subprocess.run(
        [installed.crossfeed, *argv, "--feed-file", "ledger.yaml"], cwd=tmp_path,
        env=clean_env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the PostgreSQL sink needs psycopg" in done.stderr
    assert "pip install 'crossfeed[postgres]'" in done.stderr


def test_a_mirror_feed_runs_from_the_installed_wheel(
    installed: Installed, clusters, services, topic_factory
):
    topic = topic_factory(clusters.a, partitions=3)
    produce_mixed(clusters.a.config, [topic], 3, 2_000, seed=18)
    feed = services.start_feed("wheel", clusters, [topic], pullers=0, wait=False)
    puller = feed.add_puller(python=installed.python)
    feed.wait_ready()
    source = read_many(clusters.a.config, [topic])
    target = read_many(clusters.b.config, [topic], expect=len(flatten(source)), timeout_s=90)
    a_id, b_id = clusters.a.cluster_id, clusters.b.cluster_id
    report = verify_mirror(source, target, source_cluster_id=a_id, target_cluster_id=b_id)
    report.assert_ok(feed.logs())
    assert str(installed.venv) in " ".join(puller.command)
