"""The ``crossfeed`` command in a subprocess, with a home of its own (``CROSSFEED_HOME``)
and no ``CROSSFEED_CONFIG`` from the caller's environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_crossfeed(
    home: Path, *args: str, cwd: Path | None = None, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CROSSFEED_HOME": str(home)}
    env.pop("CROSSFEED_CONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "crossfeed.cli.main", *args],
        capture_output=True,
        text=True,
        cwd=cwd or home,
        env=env,
        timeout=timeout_s,
        check=False,
    )
