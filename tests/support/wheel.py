"""Build the crossfeed wheel from the checkout's tracked files and install it into a
fresh virtualenv, as a user would (tests/integration/test_wheel.py).

Only tracked files are exported (``git ls-files``, as they are in the work tree), so an
untracked file that happens to lie in the checkout can neither help nor break the build.
The wheel's dependencies come from a wheelhouse under ``$CROSSFEED_HOME`` filled by
``pip download`` (pinned by constraints.txt) the first time, so later runs install
offline with ``--no-index``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from crossfeed import paths

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    @property
    def crossfeed(self) -> str:
        return str(self.venv / "bin" / "crossfeed")

    def top_level_names(self) -> set[str]:
        """First path components in the wheel, its .dist-info directory left out."""
        with zipfile.ZipFile(self.wheel) as whl:
            names = {n.split("/", 1)[0] for n in whl.namelist()}
        return {n for n in names if not n.endswith(".dist-info")}

    def read(self, member_suffix: str) -> str:
        with zipfile.ZipFile(self.wheel) as whl:
            (name,) = [n for n in whl.namelist() if n.endswith(member_suffix)]
            return whl.read(name).decode()


def clean_env() -> dict[str, str]:
    """The environment without anything that would point the venv at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.pop("CROSSFEED_SCHEMAS_DIR", None)
    return env


def run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run a command; a failure raises with its output (the test shows why)."""
    done = subprocess.run(
        argv, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise AssertionError(
            f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n"
            f"{done.stderr[-3000:]}"
        )
    return done


def export_tracked_files(dest: Path) -> Path:
    """Copy the checkout's tracked files (symlinks kept as symlinks) into ``dest``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = REPO_ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the work tree, not yet in the index
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    return dest


def build_and_install(workdir: Path) -> Installed:
    """Export, build the wheel (no build isolation: this interpreter's setuptools, so it
    works offline), make a fresh venv and install the wheel with its base dependencies."""
    source = export_tracked_files(workdir / "src")
    dist = workdir / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(dist), str(source)], workdir)  # fmt: skip
    (wheel,) = dist.glob("crossfeed-*.whl")
    venv = workdir / "venv"
    # sys._base_executable: the interpreter this test venv was made from.
    run([sys._base_executable, "-m", "venv", str(venv)], workdir)
    installed = Installed(wheel, venv)
    house = paths.home() / "wheelhouse"
    offline = [installed.python, "-m", "pip", "install", "-q", "--no-index",
               "--find-links", str(house), str(wheel)]  # fmt: skip
    try:
        run(offline, workdir)
    except AssertionError:
        # First run (or new pins): fetch the base dependencies once, then offline again.
        run([installed.python, "-m", "pip", "download", "-q", "-d", str(house),
             "-c", str(source / "constraints.txt"), str(wheel)], workdir, timeout=300)  # fmt: skip
        for stale in house.glob("crossfeed-*.whl"):
            stale.unlink()  # the wheel under test is always the fresh build
        run(offline, workdir)
    return installed
