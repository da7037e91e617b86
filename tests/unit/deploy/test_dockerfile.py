"""deploy/docker: one image target per service, pinned, non-root, each with its extra."""

from __future__ import annotations

import re

import pytest

from crossfeed.wire import codec
from tests.support.deploy_files import (
    DEPLOY,
    DOCKER,
    DOCKERFILE,
    ROOT,
    SERVICES,
    crossfeed_commands,
    dockerfile,
    env_problems,
    image_of,
    parse_crossfeed,
    public_image_problem,
)

pytestmark = pytest.mark.unit


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
