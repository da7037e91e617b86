"""Running one service instance: logging, /metrics + /status, signals, exit codes.

SIGTERM and SIGINT stop the instance gracefully (open transactions are committed
and tasks handed over at once), within STOP_GRACE_S even when a cluster does not answer;
a second signal exits immediately.
"""

from __future__ import annotations

import faulthandler
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from crossfeed import build_info, httpserve
from crossfeed import log as logsetup
from crossfeed.config import Settings
from crossfeed.dlq import FeedStopped

EXIT_FEED_STOPPED = 3
EXIT_STOP_TIMEOUT = 4
STOP_GRACE_S = 10.0
# The copy loops allocate objects per record (a message, its tuples) that reference
# counting frees; with the default threshold (700) the cyclic collector ran every few
# hundred records and re-scanned every message of a 5,000-record batch still held:
# ~10% of the puller's thread. Cycles are rare here and can wait for a larger count.
GC_THRESHOLD = 50_000

log = logging.getLogger(__name__)


class Worker(Protocol):
    def run(self, stop: threading.Event) -> None: ...

    def status(self) -> dict[str, Any]: ...


def _exit_after_grace() -> None:
    """A graceful stop waits on clusters (a last commit, leaving the group); with one of
    them down each call waits out its own timeout, a minute or more. Past STOP_GRACE_S
    the process exits anyway: what it had not committed is aborted by the next owner."""
    time.sleep(STOP_GRACE_S)
    log.warning("not stopped after %.0fs: exiting now; where each thread was:", STOP_GRACE_S)
    logging.shutdown()
    # Where it hung, for the operator (and the next bug report): every thread's stack.
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    os._exit(EXIT_STOP_TIMEOUT)


def _run_off_main_thread(worker: Worker, stop: threading.Event) -> None:
    """``worker.run(stop)`` on a thread of its own, re-raising what it raised.

    Python runs signal handlers on the main thread only, between bytecodes: a worker
    blocked in a client call (a commit waiting a minute for a cluster that is down) would
    hold SIGTERM back until the call returned — seen: a sink deaf to SIGTERM for 20 s. The
    main thread only waits here, so a signal is handled at once (and STOP_GRACE_S holds)."""
    failed: list[BaseException] = []

    def work() -> None:
        try:
            worker.run(stop)
        except BaseException as err:  # handed to the main thread, which decides
            failed.append(err)

    thread = threading.Thread(target=work, name="worker", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.2)  # returns to the interpreter often: signal handlers run
    if failed:
        raise failed[0]


def instance_id(role: str, given: str | None = None) -> str:
    """A readable, unique instance id: ``puller-<host>-<pid>-<4 hex>``."""
    return given or f"{role}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:4]}"


@dataclass(frozen=True)
class Who:
    """The process: its role, instance id and (if it serves one) feed — on every JSON
    log line and in ``crossfeed_build_info``."""

    role: str
    instance: str
    feed: str | None = None


def run(
    settings: Settings,
    make_worker: Callable[[], Worker],
    metrics_port: int | None,
    who: Who | None = None,
) -> int:
    """Run a worker until signalled; returns the process exit code."""
    context = {"role": who.role, "instance": who.instance, "feed": who.feed} if who else None
    logsetup.setup(settings.log_level, settings.log_format, context=context)
    if who is not None:
        build_info.publish(who.role)
    gc.set_threshold(GC_THRESHOLD, *gc.get_threshold()[1:])
    worker = make_worker()
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():
            os._exit(130)
        log.info("received %s: stopping gracefully", signal.Signals(signum).name)
        stop.set()
        threading.Thread(target=_exit_after_grace, name="stop-grace", daemon=True).start()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def status() -> dict[str, Any]:
        for _ in range(3):  # the worker mutates its maps; retry a torn read
            try:
                return worker.status()
            except RuntimeError:
                continue
        return {"state": "busy"}

    server = httpserve.serve(
        status,
        settings.metrics_port if metrics_port is None else metrics_port,
        settings.metrics_host,
    )
    port = server.server_address[1]
    if hasattr(worker, "address"):
        worker.address = f"{settings.metrics_host}:{port}"  # announced in heartbeats
    log.info("metrics and status on http://%s:%d/", settings.metrics_host, port)
    try:
        _run_off_main_thread(worker, stop)
    except FeedStopped as err:
        log.error("%s", err)
        print(f"error: {err}", file=sys.stderr)
        return EXIT_FEED_STOPPED
    except InterruptedError:
        pass
    finally:
        server.shutdown()
    return 0
