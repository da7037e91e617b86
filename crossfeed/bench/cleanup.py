"""Everything a benchmark run creates is registered here and removed on the way out —
also when the run is interrupted (Ctrl-C, SIGTERM) or fails half-way."""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from crossfeed.kafka import clients

log = logging.getLogger(__name__)

STALE_TOPICS = re.compile(
    r"^(bench-.*|_crossfeed\.bench-.*\.(changes|sorted)|mm2-.*\.internal|.*\.checkpoints\.internal|heartbeats)$"
)
"""Topics only a benchmark creates (MirrorMaker 2's internal ones included)."""


def delete_topics(conf: dict[str, Any], names: Iterable[str], wait_s: float = 30.0) -> None:
    """Delete topics and wait until the metadata no longer lists them (a topic of the same
    name can then be created again); missing topics and a cluster that is down are fine."""
    wanted = sorted(set(names))
    if not wanted:
        return
    admin = clients.admin(conf, logger=clients.QUIET)
    try:
        futures = admin.delete_topics(wanted, operation_timeout=30, request_timeout=30)
    except Exception as err:  # KafkaException: the cluster does not answer
        log.warning("could not delete %s: %s", wanted, err)
        return
    for future in futures.values():
        with contextlib.suppress(Exception):  # already gone, or never created
            future.result(timeout=60)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            listed = set(admin.list_topics(timeout=5).topics)
        except Exception:
            return
        if not listed.intersection(wanted):
            return
        time.sleep(0.2)


STALE_GROUPS = re.compile(r"^(bench-.*|crossfeed-(puller|sink)\.bench-.*)$")
"""Consumer groups only a benchmark creates."""


def delete_groups(conf: dict[str, Any], names: Iterable[str]) -> None:
    """Delete consumer groups (they hold committed offsets); missing ones are fine."""
    wanted = sorted(set(names))
    if not wanted:
        return
    admin = clients.admin(conf, logger=clients.QUIET)
    try:
        futures = admin.delete_consumer_groups(wanted, request_timeout=15)
    except Exception as err:  # KafkaException: the cluster does not answer
        log.warning("could not delete groups %s: %s", wanted, err)
        return
    for future in futures.values():
        with contextlib.suppress(Exception):  # not there, or not empty yet
            future.result(timeout=30)


def stale_groups(conf: dict[str, Any]) -> list[str]:
    """Consumer groups an earlier, interrupted benchmark left on a cluster."""
    admin = clients.admin(conf, logger=clients.QUIET)
    try:
        listed = admin.list_consumer_groups(request_timeout=10).result(timeout=15)
    except Exception:
        return []
    return sorted(g.group_id for g in listed.valid if STALE_GROUPS.match(g.group_id))


def stale_topics(conf: dict[str, Any]) -> list[str]:
    """Topics an earlier, interrupted benchmark left on a cluster."""
    admin = clients.admin(conf, logger=clients.QUIET)
    try:
        names = admin.list_topics(timeout=10).topics
    except Exception:
        return []
    return sorted(n for n in names if STALE_TOPICS.match(n))


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """SIGTERM, wait ``grace_s``, then SIGKILL; returns once it is gone."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait(timeout=10)


class Janitor:
    """Processes, topics, temporary directories and stopped clusters of one run."""

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen[bytes]] = []
        self._topics: dict[str, tuple[dict[str, Any], set[str]]] = {}
        self._dirs: list[Path] = []
        self._restart: dict[str, Callable[[], object]] = {}

    # -- registering ---------------------------------------------------------------------

    def process(self, proc: subprocess.Popen[bytes]) -> subprocess.Popen[bytes]:
        self._procs.append(proc)
        return proc

    def topics(self, conf: dict[str, Any], names: Iterable[str]) -> None:
        key = str(conf["bootstrap.servers"])
        self._topics.setdefault(key, (conf, set()))[1].update(names)

    def tempdir(self, prefix: str) -> Path:
        path = Path(tempfile.mkdtemp(prefix=f"crossfeed-bench-{prefix}-"))
        self._dirs.append(path)
        return path

    def restart_later(self, alias: str, start: Callable[[], object]) -> None:
        """A cluster the run stopped: started again on clean-up if the run does not."""
        self._restart[alias] = start

    def restarted(self, alias: str) -> None:
        self._restart.pop(alias, None)

    # -- removing ------------------------------------------------------------------------

    def stop(self, proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
        stop_process(proc, grace_s)
        with contextlib.suppress(ValueError):
            self._procs.remove(proc)

    def drop_topics(self, conf: dict[str, Any], names: Iterable[str]) -> None:
        wanted = set(names)
        delete_topics(conf, wanted)
        entry = self._topics.get(str(conf["bootstrap.servers"]))
        if entry:
            entry[1].difference_update(wanted)

    def clean(self) -> None:
        for proc in reversed(self._procs):
            stop_process(proc)
        self._procs.clear()
        for alias, start in list(self._restart.items()):
            log.info("starting %s again", alias)
            with contextlib.suppress(Exception):
                start()
        self._restart.clear()
        for conf, names in self._topics.values():
            delete_topics(conf, names)
        self._topics.clear()
        for path in self._dirs:
            shutil.rmtree(path, ignore_errors=True)
        self._dirs.clear()

    def __enter__(self) -> Janitor:
        self._old_term = signal.signal(signal.SIGTERM, _interrupt)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        err: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # A second Ctrl-C while cleaning up would leave things behind: hold it off.
        old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            self.clean()
        finally:
            signal.signal(signal.SIGINT, old_int)
            signal.signal(signal.SIGTERM, self._old_term)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")
