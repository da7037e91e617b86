"""Class-data sharing archives for crossfeed's JVMs: a start in about half the CPU.

A JVM spends most of its start loading, parsing and verifying classes: a broker ~8
CPU-seconds to ready, Spark's driver ~11. JDK 17 can write the classes one run loaded to
an archive at exit (``-XX:ArchiveClassesAtExit``); later runs map them from disk instead
(``-XX:SharedArchiveFile``): measured, a broker's start to ready took 4-6 CPU-s with its
archive and Spark's driver 5-6 (make test starts dozens of each, a user restarts them).

``make setup`` records one archive per kind of JVM (``crossfeed local archive-classes``:
a broker, a Connect worker and a sorter's Spark driver run once) in
``.crossfeed/lib/class-archives/``. An archive belongs to the classpath it was recorded
with: beside each ``<kind>.jsa`` is ``<kind>.key``, a digest of that classpath, and a JVM
is given the archive only while the digest matches. The JVM checks the rest itself (its
own build, the jars' sizes and times) and runs without the archive, as it does with none,
if anything differs. ``CROSSFEED_CLASS_ARCHIVES=off`` starts every JVM without one.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from crossfeed import paths

KINDS = ("broker", "connect", "spark-driver")
RECORD_ENV = "CROSSFEED_CLASS_ARCHIVES_RECORD"
"""Set (to a directory) while ``archive-classes`` runs: every JVM started then writes
its kind's archive there at exit instead of using one."""


def directory() -> Path:
    return paths.lib_dir("class-archives") / "class-archives"


def key(classpath: str) -> str:
    return hashlib.sha256(classpath.encode()).hexdigest()


def jvm_options(kind: str, classpath: str) -> list[str]:
    """Options for a JVM of ``kind`` on ``classpath``: its archive, or none."""
    if kind not in KINDS:
        raise ValueError(f"unknown kind of JVM {kind!r}: one of {', '.join(KINDS)}")
    recording = os.environ.get(RECORD_ENV)
    if recording:
        return [f"-XX:ArchiveClassesAtExit={Path(recording) / f'{kind}.jsa'}"]
    if os.environ.get("CROSSFEED_CLASS_ARCHIVES", "on").lower() in ("off", "0", "false", "no"):
        return []
    archive = directory() / f"{kind}.jsa"
    stamp = directory() / f"{kind}.key"
    try:
        if archive.is_file() and stamp.read_text().strip() == key(classpath):
            return [f"-XX:SharedArchiveFile={archive}"]
    except OSError:
        pass
    return []
