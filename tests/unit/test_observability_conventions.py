"""The naming conventions of crossfeed's metrics and logs (Prometheus and operators')."""

from __future__ import annotations

import io
import json
import logging

import pytest
from prometheus_client import REGISTRY

import crossfeed.build_info
import crossfeed.services.coordinator.metrics
import crossfeed.services.puller.metrics
import crossfeed.services.sink.metrics
import crossfeed.services.sorter.metrics
import crossfeed.translation.metrics
from crossfeed import __version__
from crossfeed import log as logsetup

pytestmark = pytest.mark.unit

MODULES = (
    crossfeed.build_info,
    crossfeed.translation.metrics,
    crossfeed.services.coordinator.metrics,
    crossfeed.services.puller.metrics,
    crossfeed.services.sink.metrics,
    crossfeed.services.sorter.metrics,
)


def families() -> dict[str, str]:
    """crossfeed_* metric family name -> type, of every module above (imported)."""
    assert MODULES
    return {f.name: f.type for f in REGISTRY.collect() if f.name.startswith("crossfeed_")}


def test_timestamps_are_named_timestamp_seconds_and_durations_are_histograms() -> None:
    found = families()
    stamps = [n for n in found if "_ts" in n or "timestamp" in n]
    assert stamps
    for name in stamps:
        assert name.endswith("_timestamp_seconds") and found[name] == "gauge", name
    for name in (
        "crossfeed_puller_transaction_commit_seconds",
        "crossfeed_sink_transaction_commit_seconds",
        "crossfeed_coordinator_translation_round_seconds",
        "crossfeed_coordinator_failover_duration_seconds",
        "crossfeed_coordinator_leader_failover_seconds",
    ):
        assert found[name] == "histogram", name


def test_build_info_names_the_version_and_role() -> None:
    crossfeed.build_info.publish("puller")
    value = REGISTRY.get_sample_value(
        "crossfeed_build_info",
        crossfeed.build_info.labels("puller"),
    )
    assert value == 1.0
    assert crossfeed.build_info.labels("puller")["version"] == __version__


def test_json_log_lines_carry_the_feed_and_the_instance() -> None:
    logsetup.setup("INFO", "json", context={"role": "puller", "instance": "p-1", "feed": "orders"})
    handler = logging.getLogger().handlers[0]
    out = io.StringIO()
    handler.setStream(out)  # type: ignore[attr-defined]
    logging.getLogger("crossfeed.services.puller.worker").info("task %d started", 3)
    logging.getLogger("x").info("moved", extra={"feed": "other", "task": "other/1"})
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["msg"] == "task 3 started"
    assert (first["feed"], first["instance"], first["role"]) == ("orders", "p-1", "puller")
    assert (second["feed"], second["task"], second["instance"]) == ("other", "other/1", "p-1")
    logsetup.setup("INFO", "json")  # a process without context: no such keys
    handler = logging.getLogger().handlers[0]
    out = io.StringIO()
    handler.setStream(out)  # type: ignore[attr-defined]
    logging.getLogger("y").info("plain")
    assert "feed" not in json.loads(out.getvalue())
    logsetup.setup("INFO", "text")
