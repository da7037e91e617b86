"""``crossfeed bench`` / ``make bench``: run the scenarios, write JSON and a chart."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from crossfeed import __version__, paths
from crossfeed.bench import mirror
from crossfeed.local import stack


def machine() -> dict[str, Any]:
    import psutil

    return {
        "cpus": os.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "crossfeed": __version__,
    }


def run(records: int, size: int, out_dir: Path | None = None) -> Path:
    stack.up(postgres=False)
    a = {"bootstrap.servers": stack.node("dc-a").bootstrap}
    b = {"bootstrap.servers": stack.node("dc-b").bootstrap}
    result = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "scenarios": {"mirror_crossfeed": mirror.run(a, b, records=records, size=size)},
    }
    out_dir = out_dir or paths.project_root() / "bench" / "results"
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{time.strftime('%Y%m%dT%H%M%S')}.json"
    path.write_text(json.dumps(result, indent=2))
    return path
