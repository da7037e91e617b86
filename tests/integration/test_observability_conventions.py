"""A service process's JSON log lines carry its role, instance and feed (the process
serves /metrics on a loopback port; the other conventions are checked in
tests/unit/test_observability_conventions.py)."""

from __future__ import annotations

import json
import logging
import signal
import threading
from typing import Any

import pytest

from crossfeed import log as logsetup
from crossfeed import service
from crossfeed.config import Settings

pytestmark = pytest.mark.integration


def test_a_service_process_logs_its_feed_and_instance_in_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    class Worker:
        def run(self, stop: threading.Event) -> None:
            logging.getLogger("crossfeed.services.puller.worker").info("copying")

        def status(self) -> dict[str, Any]:
            return {}

    settings = Settings(log_format="json", clusters={"dc-a": {"bootstrap.servers": "x:1"}})
    who = service.Who("puller", "puller-7", "orders")
    try:
        assert service.run(settings, Worker, 0, who) == 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        logsetup.setup("INFO", "text")
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    copying = next(line for line in lines if line["msg"] == "copying")
    assert (copying["feed"], copying["instance"], copying["role"]) == (
        "orders",
        "puller-7",
        "puller",
    )
    assert all(line["instance"] == "puller-7" for line in lines)
