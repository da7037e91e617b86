"""How each replicator moves a consumer group to dc-b — the seam the failover scenario
measures through. A side that cannot run says why (``unavailable``), never a zero.

* MirrorMaker 2: checkpoints and group offset sync every second
  (``sync.group.offsets.enabled``); after losing dc-a there is nothing more to do —
  the group starts on dc-b from what MM2 last wrote there.
* crossfeed: the feed's translator ticks every ``coordinator.translate_interval_s``
  (1 s), as the coordinator leader runs it, and writes the destination group offsets;
  after losing dc-a, ``crossfeed failover``'s last step runs: one final translation from
  what is known (``Translator.final``), then the group starts on dc-b.
* crossfeed-optin: the same, with the application's group on the client library's
  ``TimestampedConsumer`` and its opt-in (``timestamps.destination.*``: every commit is
  also recorded on dc-b before ``commit()`` returns).

``opt_in`` tells the scenario which consumer the application uses.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from typing import Any, Protocol

from crossfeed.bench.systems import Crossfeed, MirrorMaker2

log = logging.getLogger(__name__)


class FailoverSide(Protocol):
    name: str
    opt_in: bool

    def unavailable(self) -> str | None:
        """Why this side cannot be measured, or None."""
        ...

    def start(self, topic: str, group: str) -> dict[str, int]: ...

    def fail_over(self, group: str) -> dict[str, Any]:
        """What the replicator does once dc-a is lost, before the group starts on dc-b."""
        ...

    def stop(self) -> None: ...

    def log_tail(self) -> str: ...


class Mm2Side:
    name = "mm2"
    opt_in = False

    def __init__(self, mm2: MirrorMaker2) -> None:
        self.mm2 = mm2

    def unavailable(self) -> str | None:
        return None

    def start(self, topic: str, group: str) -> dict[str, int]:
        return self.mm2.start([topic], groups=[group])

    def fail_over(self, group: str) -> dict[str, Any]:
        return {"step": "none: the group offsets MM2 last synced to dc-b stand"}

    def stop(self) -> None:
        self.mm2.stop()

    def log_tail(self) -> str:
        return self.mm2.log_tail()


def crossfeed_translation() -> tuple[Any, str | None]:
    """crossfeed's offset translator class, or why it cannot be used (yet)."""
    try:
        module = importlib.import_module("crossfeed.translation.translator")
    except Exception as err:  # not there yet, or broken while being built
        return None, f"crossfeed.translation is not importable ({type(err).__name__}: {err})"
    translator = getattr(module, "Translator", None)
    missing = [m for m in ("tick", "final", "close") if not hasattr(translator, m)]
    if translator is None or missing:
        return None, f"crossfeed.translation.translator has no usable Translator ({missing})"
    return translator, None


class CrossfeedSide:
    def __init__(
        self, crossfeed: Crossfeed, interval_s: float = 1.0, *, opt_in: bool = False
    ) -> None:
        self.name = "crossfeed-optin" if opt_in else "crossfeed"
        self.opt_in = opt_in
        self.crossfeed = crossfeed
        self.interval_s = interval_s
        self.translator: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def unavailable(self) -> str | None:
        return crossfeed_translation()[1]

    def start(self, topic: str, group: str) -> dict[str, int]:
        from crossfeed.config.loader import load_settings
        from crossfeed.feeds import parse_feed

        cls, reason = crossfeed_translation()
        if reason:
            raise RuntimeError(reason)
        pids = self.crossfeed.start([topic])
        settings = load_settings(self.crossfeed.config)
        feed = parse_feed(self.crossfeed.feed_spec([topic]), "benchmark feed")
        self.interval_s = float(settings.coordinator.translate_interval_s)
        self.translator = cls(settings, feed)
        self._stop.clear()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()
        return pids

    def _tick(self) -> None:
        while not self._stop.is_set():
            try:
                self.translator.tick()
            except Exception:  # as the coordinator does: a bad round is not the end
                log.exception("translation round failed")
            self._stop.wait(self.interval_s)

    def _stop_ticking(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def fail_over(self, group: str) -> dict[str, Any]:
        # As the coordinator's failover does (TranslatorLoop.take): no more ticks, but no
        # waiting for one in flight either (stop() joins it) — final() makes it give up on
        # a dead dc-a, and takes the translator as soon as it does.
        self._stop.set()
        began = time.monotonic()
        results, report = self.translator.final()
        moved = report.committed.get(group, 0)
        exact = sum(1 for r in results if r.group == group and r.exact)
        return {
            "step": "Translator.final() (crossfeed failover's last translation)",
            "final_s": time.monotonic() - began,
            "partitions_moved": moved,
            "partitions_exact": exact,
        }

    def stop(self) -> None:
        self._stop_ticking()
        if self.translator is not None:
            try:
                self.translator.close()
            except Exception:
                log.exception("closing the translator")
            self.translator = None
        self.crossfeed.stop()

    def log_tail(self) -> str:
        return self.crossfeed.log_tail()
