"""Starting, finding and stopping the stack's background processes by pid file."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil


def running_pid(pid_file: Path, marker: str) -> int | None:
    """The pid in ``pid_file`` if that process is alive and its command line has ``marker``.

    The marker (a path unique to this process) guards against a recycled pid.
    """
    try:
        pid = int(pid_file.read_text().strip())
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        cmdline = proc.cmdline()
        # An empty command line is a process between fork and exec (the java launcher
        # re-executes itself): alive, and ours if the pid file names it.
        if not cmdline or any(marker in part for part in cmdline):
            return pid
    except (OSError, ValueError, psutil.Error):
        pass
    return None


def spawn(cmd: Sequence[str], log_file: Path, pid_file: Path, env: dict[str, str]) -> int:
    """Start ``cmd`` detached (own session, so Ctrl-C in the shell does not reach it)."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as log:
        proc = subprocess.Popen(
            list(cmd),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    pid_file.write_text(str(proc.pid))
    return proc.pid


def terminate(pid: int, *, grace_s: float = 20.0, hard: bool = False) -> None:
    """SIGTERM (or SIGKILL when ``hard``), wait, then SIGKILL; returns when it is gone."""
    try:
        proc = psutil.Process(pid)
        children = proc.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for p in [proc, *children]:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
    _, alive = psutil.wait_procs([proc, *children], timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    # Reap it if it was our own child (tests start the stack in-process).
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop(pid: int | None, *, hard: bool = False) -> bool:
    """:func:`terminate` a process found by its pid file (None: not running); True if
    it ran."""
    if pid is None:
        return False
    terminate(pid, hard=hard)
    return True


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    """Poll ``check()`` until it is true or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return bool(check())


TAIL_BYTES = 64 << 10  # the end of a log file read for its last lines


def tail(path: Path, lines: int = 15) -> str:
    """Last lines of a log file, for error messages. Only its end is read: a broker's
    log reached 10 GB in a long-lived local stack, and reading it whole took a test
    process past 20 GB of memory."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - TAIL_BYTES))
            text = log.read().decode("utf-8", errors="replace")
    except OSError:
        return "(no log yet)"
    return "\n".join(text.splitlines()[-lines:])


def rotate(path: Path, max_bytes: int = 64 << 20) -> None:
    """Keep one older log (``<name>.1``) once ``path`` grew past ``max_bytes``: a broker
    writes its output there for as long as the local stack lives, restarts included."""
    with contextlib.suppress(OSError):
        if path.stat().st_size > max_bytes:
            path.replace(path.with_name(path.name + ".1"))


def free_port() -> int:
    """A loopback port nothing listens on now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
