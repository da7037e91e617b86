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


def setup(
    level: str = "INFO",
    fmt: str = "text",
    name: str = "crossfeed",
    context: Mapping[str, str | None] | None = None,
) -> logging.Logger:
    _context.clear()
    _context.update({k: v for k, v in (context or {}).items() if v})
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            MaskingFormatter("%(asctime)s %(levelname)-5s %(name)s: %(message)s", "%H:%M:%S")
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # librdkafka reports every failed connection attempt; keep them out unless debugging.
    logging.getLogger("crossfeed.kafka").setLevel(
        logging.DEBUG if level == "DEBUG" else logging.CRITICAL
    )
    return logging.getLogger(name)
