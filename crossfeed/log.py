"""Logging for every service: readable lines by default, JSON with --log-format json.

Logs tell the story of decisions ("task 3 of orders assigned to puller-1a2b"). A JSON
line carries the process's ``role``, ``instance`` and (for a process serving one feed)
``feed`` — set once by ``setup(context=...)`` — so a log store can filter one feed or
one instance across all processes; a record's own ``feed``/``instance``/``task``
(``extra=``) win over the process's.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

from crossfeed.core.secrets import mask_text

_context: dict[str, str] = {}
"""What every JSON line of this process says about where it came from."""


class MaskingFormatter(logging.Formatter):
    """Text lines with URI passwords and ``password=`` values masked."""

    def format(self, record: logging.LogRecord) -> str:
        return mask_text(super().format(record))


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": mask_text(record.getMessage()),
        }
        line.update(_context)
        for key in ("feed", "instance", "task"):
            if hasattr(record, key):
                line[key] = getattr(record, key)
        if record.exc_info:
            line["exc"] = mask_text(self.formatException(record.exc_info))
        return json.dumps(line)


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to ``sys.stderr`` as it is when a line is logged, not as it was when the
    handler was made: a live terminal view that takes stderr over (rich's ``Live``, the
    demo's table) then prints log lines above itself, instead of being pushed up by them
    and leaving a stale frame behind. ``setStream`` still pins it to a stream."""

    def __init__(self) -> None:
        super().__init__()
        self._pinned: Any = None  # StreamHandler's constructor set it to today's stderr

    @property
    def stream(self) -> Any:
        return sys.stderr if self._pinned is None else self._pinned

    @stream.setter
    def stream(self, value: Any) -> None:
        self._pinned = value


FENCED_WORDS = ("fenced", "old epoch", "invalid_producer_epoch")


def is_fencing(message: str) -> bool:
    """A librdkafka line saying a newer producer with the same transactional.id took
    over this one (``PRODUCER_FENCED``, an old epoch)."""
    text = message.lower()
    return any(word in text for word in FENCED_WORDS)


class ExpectedFencing(logging.Filter):
    """librdkafka logs a producer fenced by a newer one as FATAL (CRITICAL here). It is
    expected: a failover takes every puller task's transactional.id over on the target,
    a task that moves is fenced by its new owner, a new coordinator leader fences the old
    one's writer. Each service handles it (the task stops, or its producer is made again),
    so the line becomes a WARNING that says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        if (
            record.levelno >= logging.CRITICAL
            and record.name.startswith("crossfeed.kafka")
            and is_fencing(record.getMessage())
        ):
            message = record.getMessage()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.msg = (
                "fenced: another producer took this transactional.id over (a failover, a "
                "task moved to another instance, or a new leader); this one stops using it "
                "(librdkafka: %s)"
            )
            record.args = (message,)
        return True


def setup(
    level: str = "INFO",
    fmt: str = "text",
    name: str = "crossfeed",
    context: Mapping[str, str | None] | None = None,
) -> logging.Logger:
    _context.clear()
    _context.update({k: v for k, v in (context or {}).items() if v})
    handler = StderrHandler()
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            MaskingFormatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s", "%H:%M:%S")
        )
    handler.addFilter(ExpectedFencing())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    quiet_librdkafka(level)
    return logging.getLogger(name)


def quiet_librdkafka(level: str = "INFO") -> None:
    """librdkafka's own lines (every client's ``logger`` is ``crossfeed.kafka.<kind>``,
    crossfeed/kafka/clients.py) report every failed connection attempt: keep them out
    unless debugging. What they mean is said once, in crossfeed's words
    (crossfeed/kafka/diagnose.py, the services' status)."""
    logging.getLogger("crossfeed.kafka").setLevel(
        logging.DEBUG if level == "DEBUG" else logging.CRITICAL
    )
