"""The translator runner's start-up stagger: pure threading, with a stand-in translator
that only counts its rounds (no Kafka behaviour is asserted here)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from crossfeed.services.coordinator.failover.loop import _Runner
from crossfeed.translation.results import TickReport

pytestmark = pytest.mark.unit


class _CountingTranslator:
    def __init__(self) -> None:
        self.feed: Any = type("Feed", (), {"name": "f"})()
        self.rounds = 0
        self.first = threading.Event()
        self.ready = True

    def tick(self) -> TickReport:
        self.rounds += 1
        self.first.set()
        return TickReport("f", ready=self.ready)


def test_a_staggered_runner_waits_its_delay_before_the_first_round() -> None:
    translator = _CountingTranslator()
    runner = _Runner(translator, interval_s=10.0, delay_s=0.3)  # type: ignore[arg-type]
    began = time.monotonic()
    runner.thread.start()
    assert translator.first.wait(5)
    assert time.monotonic() - began >= 0.3
    runner.stop_event.set()
    runner.thread.join(5)
    assert translator.rounds == 1


def test_a_runner_stopped_during_its_delay_never_runs_a_round() -> None:
    translator = _CountingTranslator()
    runner = _Runner(translator, interval_s=10.0, delay_s=5.0)  # type: ignore[arg-type]
    runner.thread.start()
    runner.stop_event.set()
    runner.thread.join(2)
    assert not runner.thread.is_alive()
    assert translator.rounds == 0


def test_an_unstaggered_runner_starts_at_once() -> None:
    translator = _CountingTranslator()
    runner = _Runner(translator, interval_s=10.0, delay_s=0.0)  # type: ignore[arg-type]
    runner.thread.start()
    assert translator.first.wait(1)
    runner.stop_event.set()
    runner.thread.join(5)


def test_a_round_that_was_not_ready_is_tried_again_soon_not_an_interval_later() -> None:
    translator = _CountingTranslator()
    translator.ready = False  # the offset syncs are still being read
    runner = _Runner(translator, interval_s=60.0, delay_s=0.0)  # type: ignore[arg-type]
    runner.thread.start()
    time.sleep(1.3)
    runner.stop_event.set()
    runner.thread.join(5)
    assert 2 <= translator.rounds <= 4
