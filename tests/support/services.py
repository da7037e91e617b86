"""crossfeed services as real processes, for end-to-end tests.

:class:`ServiceProcess` runs one ``crossfeed <role> run`` instance as a subprocess with a
generated configuration file and feed file, a free metrics port and a log file, and
lets a test kill -9, SIGTERM, pause (SIGSTOP), resume and restart it and read its
``/status``. :class:`ServiceFactory` starts whole feeds (pullers; for ordered feeds also
sorters and sinks) and kills every process it started when the test ends, pass or fail:
use the ``services`` fixture::

    from tests.support.services import services  # noqa: F401  (or via conftest)

    def test_copy(clusters, services, topic_factory):
        feed = services.start_feed("f1", clusters, [topic], pullers=2)
        ...
        feed.pullers[0].kill()

Every assertion message names the log file of the process concerned and shows its tail.
Processes also die with the test run itself (PR_SET_PDEATHSIG) if pytest is killed.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support import worker_stack

REPO_ROOT = Path(__file__).resolve().parents[2]
EXIT_FEED_STOPPED = 3

# Started in the child before exec'ing the service: ask the kernel to SIGKILL it when the
# thread that started it dies (pytest killed, os._exit by a timeout), then check the
# parent did not die already. Only used for processes started from the main thread.
_LAUNCHER = (
    "import ctypes, os, sys\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "libc.prctl(1, 9, 0, 0, 0)\n"  # PR_SET_PDEATHSIG, SIGKILL
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(137)\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])\n"
)

_LIVE: set[ServiceProcess] = set()
"""Processes started and not yet reaped: killed at interpreter exit, whatever happens."""


@atexit.register
def _kill_live() -> None:
    for proc in list(_LIVE):
        with contextlib.suppress(Exception):
            proc.kill()


_GIVEN_PORTS: set[int] = set()
_NEXT_IN_BLOCK = 0


def free_port() -> int:
    """A TCP port nothing listens on right now, and never one this test run handed out
    before: the kernel may offer a port again as soon as it is closed, and two services
    started together then collided (a coordinator's REST port was its neighbour's metrics
    port: "Address already in use").

    In one process the kernel picks (bind port 0). Under pytest-xdist each worker walks a
    block of ports of its own (worker_stack.port_block), so two workers never hand out the
    same one; the kernel cannot be asked for that, since Linux gives bind(0) odd ports
    only, and a rule by residue left a worker with none at all."""
    block = worker_stack.port_block()
    if block is None:
        while True:
            port = _bound_free(0)
            if port not in _GIVEN_PORTS:
                _GIVEN_PORTS.add(port)
                return port
    global _NEXT_IN_BLOCK
    for _ in range(len(block)):
        port = block[_NEXT_IN_BLOCK % len(block)]
        _NEXT_IN_BLOCK += 1
        with contextlib.suppress(OSError):
            return _bound_free(port)
    raise RuntimeError(f"no free port left in ports {block.start}-{block.stop - 1}")


def _bound_free(port: int) -> int:
    """Bind ``port`` on 127.0.0.1 (0: the kernel's choice), close it, return it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        return int(sock.getsockname()[1])


def feed_name(text: str) -> str:
    """``text`` as a legal feed name (lowercase, ``[a-z0-9_-]``, at most 63 characters);
    a long name keeps its head plus a hash of the whole, so it stays unique."""
    name = re.sub(r"[^a-z0-9_-]+", "-", text.lower()).strip("-_") or "feed"
    if len(name) > 63:
        digest = hashlib.sha1(text.encode()).hexdigest()[:8]
        name = f"{name[:54].rstrip('-_')}-{digest}"
    return name


class ServiceProcess:
    """One ``crossfeed <role> run`` process (puller, sink, ...)."""

    def __init__(
        self,
        role: str,
        *,
        feed: str,
        feed_file: Path,
        config_file: Path,
        workdir: Path,
        instance: str | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        python: str | None = None,
    ) -> None:
        self.role = role
        # Another interpreter (an installed crossfeed, tests/support/wheel.py) runs the
        # crossfeed it has installed; None: this one, with the checkout on PYTHONPATH.
        self.python = python
        self.feed = feed
        self.feed_file = Path(feed_file)
        self.config_file = Path(config_file)
        self.workdir = Path(workdir)
        self.instance = instance or f"{role}-{feed}"
        self.extra_args = list(extra_args)
        self.env = dict(env or {})
        self.log_path = self.workdir / f"{self.instance}.log"
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.paused = False
        self.starts = 0
        self.exit_codes: list[int] = []  # of earlier runs (restarts)

    # -- life cycle ----------------------------------------------------------------------

    @property
    def command(self) -> list[str]:
        """The service command line (what the launcher execs)."""
        return [
            self.python or sys.executable,
            "-m",
            "crossfeed.cli.main",
            "--config",
            str(self.config_file),
            self.role,
            "run",
            "--feed",
            self.feed,
            "--feed-file",
            str(self.feed_file),
            "--metrics-port",
            str(self.port),
            "--instance",
            self.instance,
            *self.extra_args,
        ]

    def start(self) -> ServiceProcess:
        """Start the process (on a fresh free metrics port); returns at once."""
        if self.alive:
            raise RuntimeError(f"{self.describe()} is already running")
        self.port = free_port()
        self.paused = False
        self.starts += 1
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "CROSSFEED_CONFIG": str(self.config_file),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p
            ),
            **self.env,
        }
        if self.python:
            env.pop("PYTHONPATH")
        command = self.command
        if threading.current_thread() is threading.main_thread():
            # The launcher runs in the service's interpreter and execs that same one.
            command = [command[0], "-c", _LAUNCHER, str(os.getpid()), *command[1:]]
        self.workdir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            stamp = time.strftime("%H:%M:%S")
            log.write(f"===== {stamp} start #{self.starts}: {' '.join(self.command)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=env,
                start_new_session=True,  # a Ctrl-C of the test run is handled by teardown
            )
        _LIVE.add(self)
        return self

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> int | None:
        """SIGKILL (kill -9) and wait; returns the exit code (-9), None if never started."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.kill()
        code = self.proc.wait()
        self.paused = False
        _LIVE.discard(self)
        return code

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (graceful stop) and wait up to ``timeout`` s, then SIGKILL.

        Returns the exit code; ``-9`` means it did not stop in time (see the log).
        """
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._note(f"did not stop within {timeout}s of SIGTERM: killing it")
                self.proc.kill()
        code = self.proc.wait()
        _LIVE.discard(self)
        return code

    def pause(self) -> None:
        """SIGSTOP: the process freezes (no heartbeats, no writes) until resume()."""
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        """SIGCONT after pause()."""
        self._signal(signal.SIGCONT)
        self.paused = False

    def restart(self, *, hard: bool = True, timeout: float = 30.0) -> ServiceProcess:
        """Stop (kill -9 if ``hard``, else SIGTERM) and start again, same instance id."""
        code = self.kill() if hard else self.terminate(timeout)
        if code is not None:
            self.exit_codes.append(code)
        return self.start()

    def _signal(self, sig: signal.Signals) -> None:
        if not self.alive or self.proc is None:
            raise AssertionError(f"cannot send {sig.name}: {self.describe()} is not running")
        os.kill(self.proc.pid, sig)

    def _note(self, text: str) -> None:
        with contextlib.suppress(OSError), open(self.log_path, "a") as log:
            log.write(f"===== {time.strftime('%H:%M:%S')} test harness: {text}\n")

    # -- observing -----------------------------------------------------------------------

    def _get(self, path: str, timeout: float) -> bytes | None:
        if self.port is None or not self.alive:
            return None
        try:
            url = f"http://127.0.0.1:{self.port}{path}"
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return bytes(response.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def status(self, timeout: float = 2.0) -> dict[str, Any] | None:
        """GET /status as a dict, or None if the process does not answer."""
        body = self._get("/status", timeout)
        if body is None:
            return None
        try:
            data = json.loads(body)
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    def metrics(self, timeout: float = 2.0) -> str | None:
        """GET /metrics (Prometheus text), or None if the process does not answer."""
        body = self._get("/metrics", timeout)
        return None if body is None else body.decode(errors="replace")

    def metric(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        """The value of one sample in /metrics (sum over series matching ``labels``)."""
        text = self.metrics()
        if text is None:
            return None
        total, found = 0.0, False
        for line in text.splitlines():
            if line.startswith("#") or not line.startswith(name):
                continue
            series, _, value = line.rpartition(" ")
            metric_name, _, label_text = series.partition("{")
            if metric_name != name:
                continue
            if labels and not all(f'{k}="{v}"' in label_text for k, v in labels.items()):
                continue
            total += float(value)
            found = True
        return total if found else None

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def describe(self) -> str:
        state = (
            "not started"
            if self.proc is None
            else f"pid {self.proc.pid}, "
            + ("paused" if self.paused else "running" if self.alive else f"exit {self.returncode}")
        )
        return f"{self.role} {self.instance} ({state}, port {self.port}, log {self.log_path})"

    def failure(self, message: str, lines: int = 40) -> AssertionError:
        """An AssertionError naming this process, its log file and the log's tail."""
        return AssertionError(
            f"{message}\n{self.describe()}\n--- last {lines} lines of {self.log_path} ---\n"
            f"{self.log_tail(lines)}"
        )

    # -- waiting -------------------------------------------------------------------------

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until /status answers; returns it. Fails if the process exits first."""
        return self.wait_status(lambda _s: True, timeout, "answering /status")

    def wait_status(
        self,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float = 60.0,
        what: str = "the expected status",
        every: float = 0.2,
    ) -> dict[str, Any]:
        """Poll /status every ``every`` seconds until ``predicate(status)``; returns that
        status."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] | None = None
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise self.failure(f"{self.role} exited with {self.returncode} before {what}")
            status = self.status()
            if status is not None:
                last = status
                try:
                    if predicate(status):
                        return status
                except (KeyError, TypeError, ValueError, IndexError):
                    pass
            if time.monotonic() > deadline:
                raise self.failure(f"{self.role} not {what} after {timeout}s; last status {last}")
            time.sleep(every)

    def wait_state(self, state: str, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until /status reports ``state`` ("normal", "error", ...)."""
        return self.wait_status(lambda s: s.get("state") == state, timeout, f"in state {state!r}")

    def wait_exit(self, timeout: float = 60.0) -> int:
        """Wait for the process to exit by itself; returns its exit code."""
        if self.proc is None:
            raise AssertionError(f"{self.describe()} was never started")
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise self.failure(f"{self.role} still running after {timeout}s") from None
        _LIVE.discard(self)
        return code

    def assert_alive(self) -> None:
        if not self.alive:
            raise self.failure(f"{self.role} is not running (exit {self.returncode})")


class Feed:
    """The processes of one feed started by :meth:`ServiceFactory.start_feed`."""

    def __init__(
        self,
        factory: ServiceFactory,
        spec: dict[str, Any],
        feed_file: Path,
        config_file: Path,
        workdir: Path,
        env: Mapping[str, str] | None,
    ) -> None:
        self.factory = factory
        self.spec = spec
        self.name: str = spec["name"]
        self.feed_file = feed_file
        self.config_file = config_file
        self.workdir = workdir
        self.env = dict(env or {})
        self.pullers: list[ServiceProcess] = []
        self.sorters: list[ServiceProcess] = []
        self.sinks: list[ServiceProcess] = []

    @property
    def changes_topic(self) -> str:
        return f"_crossfeed.{self.name}.changes"

    @property
    def sorted_topic(self) -> str:
        return f"_crossfeed.{self.name}.sorted"

    @property
    def processes(self) -> list[ServiceProcess]:
        return [*self.pullers, *self.sorters, *self.sinks]

    def add(
        self,
        role: str,
        *,
        start: bool = True,
        extra_args: Sequence[str] = (),
        python: str | None = None,
    ) -> ServiceProcess:
        """One more instance of ``role`` ("puller", "sorter" or "sink") for this feed."""
        groups = {"puller": self.pullers, "sorter": self.sorters, "sink": self.sinks}
        group = groups.get(role)
        if group is None:
            raise ValueError(f"role must be 'puller', 'sorter' or 'sink', not {role!r}")
        proc = ServiceProcess(
            role,
            feed=self.name,
            feed_file=self.feed_file,
            config_file=self.config_file,
            workdir=self.workdir,
            instance=f"{role}-{self.name}-{len(group)}",
            extra_args=extra_args,
            env=self.env,
            python=python,
        )
        group.append(proc)
        self.factory.track(proc)
        if start:
            proc.start()
        return proc

    def add_puller(self, **kwargs: Any) -> ServiceProcess:
        return self.add("puller", **kwargs)

    def add_sorter(self, **kwargs: Any) -> ServiceProcess:
        return self.add("sorter", **kwargs)

    def add_sink(self, **kwargs: Any) -> ServiceProcess:
        return self.add("sink", **kwargs)

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for proc in self.processes:
            if proc.proc is not None:
                proc.wait_ready(max(1.0, deadline - time.monotonic()))

    def wait_state(self, state: str = "normal", timeout: float = 60.0) -> None:
        """Wait until every started process reports ``state`` in /status."""
        deadline = time.monotonic() + timeout
        for proc in self.processes:
            if proc.proc is not None:
                proc.wait_state(state, max(1.0, deadline - time.monotonic()))

    def statuses(self) -> dict[str, dict[str, Any] | None]:
        return {p.instance: p.status() for p in self.processes}

    def assert_running(self) -> None:
        """Every started process is still alive (else fail with its log)."""
        for proc in self.processes:
            if proc.proc is not None:
                proc.assert_alive()

    def stop_all(self, *, hard: bool = False, timeout: float = 30.0) -> dict[str, int | None]:
        """Stop every process (SIGTERM, or kill -9 if ``hard``); exit codes by instance."""
        codes: dict[str, int | None] = {}
        for proc in self.processes:
            codes[proc.instance] = proc.kill() if hard else proc.terminate(timeout)
        return codes

    def logs(self) -> str:
        """The log files of this feed's processes, one a line (for messages)."""
        return "\n".join(f"  {p.describe()}" for p in self.processes)


class ServiceFactory:
    """Starts feeds and services under ``base_dir``; ``close()`` kills them all."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = Path(base_dir)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self.started: list[ServiceProcess] = []
        self.feeds: list[Feed] = []

    def track(self, proc: ServiceProcess) -> None:
        self.started.append(proc)

    def write_config(
        self,
        clusters: Any,
        path: Path,
        *,
        control_cluster: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> Path:
        """A crossfeed configuration file naming the clusters (plus ``settings``)."""
        data: dict[str, Any] = {"clusters": _cluster_configs(clusters), "log_level": "INFO"}
        if control_cluster:
            data["control_cluster"] = control_cluster
        _deep_update(data, settings or {})
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def start_feed(
        self,
        name: str,
        clusters: Any,
        topics: Iterable[str],
        source: str = "dc-a",
        target: str = "dc-b",
        config: Mapping[str, Any] | None = None,
        pullers: int = 1,
        sinks: int | None = None,
        *,
        sorters: int = 0,
        sink_uri: str | None = None,
        exclude: Iterable[str] = (),
        mode: str = "mirror",
        start: str = "earliest",
        rename_format: str | None = None,
        settings: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        wait: bool = True,
        timeout: float = 60.0,
    ) -> Feed:
        """Write a feed file and a config file, start ``pullers`` + ``sorters`` + ``sinks``
        processes (``sinks``: 1 for an ordered feed unless given; a mirror feed has none —
        its pullers write the target topics).

        ``name`` is made a legal feed name (see :func:`feed_name`; ``feed.name`` holds it).
        ``clusters``: the ``clusters`` fixture (or a mapping alias -> client config).
        ``config``: the feed's options (``errors.tolerance``, ``staging.partitions``, ...).
        ``settings``: merged into the configuration file (e.g. ``{"puller":
        {"commit_interval_ms": 50}}``). ``sink_uri`` replaces ``kafka://<target>`` (ordered
        feeds: ``kafka://dc-b/TOPIC`` or ``postgresql://...``), ``sorters`` starts that many
        sorters (ordered feeds). With ``wait``, returns once every process answers
        /status (fails with the log of one that exits or does not answer).
        """
        if sinks is None:
            sinks = 0 if mode == "mirror" else 1
        if mode == "mirror" and sinks:
            raise ValueError("a mirror feed has no sink: its pullers write the target topics")
        # Feeds keep state on the clusters (staging topic, groups): a fresh suffix per
        # run keeps one run's leftovers out of the next.
        fname = feed_name(f"{name[:50]}-{uuid.uuid4().hex[:6]}")
        workdir = self.base_dir / fname
        workdir.mkdir(parents=True, exist_ok=True)
        spec: dict[str, Any] = {
            "name": fname,
            "source": source,
            "sink-uri": sink_uri or f"kafka://{target}",
            "topics": list(topics),
            "exclude": list(exclude),
            "mode": mode,
            "start": start,
        }
        if rename_format is not None:
            spec["rename-format"] = rename_format
        if config:
            spec["config"] = {str(k): v for k, v in config.items()}
        feed_file = workdir / "feed.yaml"
        feed_file.write_text(yaml.safe_dump(spec, sort_keys=False))
        config_file = self.write_config(
            clusters, workdir / "crossfeed.yaml", control_cluster=target, settings=settings
        )
        feed = Feed(self, spec, feed_file, config_file, workdir, env)
        self.feeds.append(feed)
        for _ in range(pullers):
            feed.add_puller()
        for _ in range(sorters):
            feed.add_sorter()
        for _ in range(sinks):
            feed.add_sink()
        if wait:
            feed.wait_ready(timeout)
        return feed

    def close(self) -> list[str]:
        """Kill every process started here; returns one line per process (for logs)."""
        lines = []
        for proc in self.started:
            was_running = proc.alive
            code = proc.kill()
            how = "killed at teardown" if was_running else f"had exited with {code}"
            lines.append(f"{proc.describe()}: {how}")
        return lines


def _cluster_configs(clusters: Any) -> dict[str, dict[str, Any]]:
    if isinstance(clusters, Mapping):
        return {str(alias): dict(conf) for alias, conf in clusters.items()}
    handles = [clusters.a, clusters.b]
    return {c.alias: dict(c.config) for c in handles}


def _deep_update(base: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value


@pytest.fixture
def services(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServiceFactory]:
    """Start crossfeed services; every process is killed when the test ends.

    Logs stay under pytest's temporary directory (the last three runs are kept); a
    failing test prints where they are.
    """
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:40]
    factory = ServiceFactory(tmp_path_factory.mktemp(f"services-{stem}"))
    failed_before = request.session.testsfailed
    try:
        yield factory
    finally:
        lines = factory.close()
        if lines and request.session.testsfailed > failed_before:
            print("\nservice processes of this test:\n  " + "\n  ".join(lines), file=sys.stderr)
