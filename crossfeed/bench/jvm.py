"""The JVM tools the benchmarks run beside crossfeed: how to start them, which versions."""

from __future__ import annotations

import ctypes
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

from crossfeed.local.kafka import kafka_classpath

QUIET_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = STDOUT
"""

_PR_SET_PDEATHSIG = 1
_prctl: Any
try:  # loaded here, in the parent: a forked child must not dlopen (another thread may hold
    # the loader's lock at fork time)
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _prctl = None


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGKILL when the benchmark process dies, however it
    dies (even kill -9), so no JVM or service outlives an interrupted run."""
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a child of the benchmark, its output in ``log``; it dies with the benchmark."""
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=die_with_parent,
        )


def log4j2_file(workdir: Path, level: str = "WARN") -> Path:
    path = workdir / f"log4j2-{level.lower()}.properties"
    path.write_text(QUIET_LOG4J2.format(level=level))
    return path


def java(main: str, args: list[str], *, workdir: Path, heap: str, log_level: str) -> list[str]:
    """The command line running ``main`` from the Kafka classpath ``make setup`` resolved."""
    return [
        "java",
        *heap.split(),
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={log4j2_file(workdir, log_level)}",
        "-cp",
        kafka_classpath(),
        main,
        *args,
    ]


def jar_version(classpath: str, artifact: str) -> str | None:
    """The version of ``artifact`` on a classpath (``kafka-clients`` -> ``4.3.1``)."""
    pattern = re.compile(rf"(?:^|/){re.escape(artifact)}-(\d[^/]*?)\.jar$")
    for entry in classpath.split(":"):
        found = pattern.search(entry)
        if found:
            return found.group(1)
    return None


def java_version() -> str | None:
    try:
        out = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r'version "([^"]+)"', out.stderr + out.stdout)
    return found.group(1) if found else None
