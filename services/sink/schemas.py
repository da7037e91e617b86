"""The Connect schemas of a Debezium feed's changes, kept by reference (crossfeed/wire/debezium.py).

A change in ``.sorted`` whose value is only a payload names its schema in ``crossfeed-schema``;
the schema is in ``_crossfeed.<feed>.schemas`` on the same cluster, committed in the same
Kafka transaction as the change's staging record or an earlier one. So by the time the sink
reads the change, the schema is readable: an id not known yet is looked up by reading the
topic on, up to its end.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import TopicPartition as KafkaTP

from crossfeed.kafka import clients
from crossfeed.wire import debezium, headers, topics

log = logging.getLogger(__name__)

LOOKUP_TIMEOUT_S = 30.0


class UnknownSchema(LookupError):
    """A change names a schema the schemas topic does not hold (read to its end): the
    change is a dead letter."""


class SchemasUnreadable(RuntimeError):
    """The schemas topic could not be read to its end: the sink stops (and resumes from
    its committed position when started again) rather than dead-letter a change whose
    schema may well be there."""


def reference(value: bytes | None, hdrs: list[Any] | None) -> bytes | None:
    """The id of the schema a change's value was split from (the value is then its payload
    alone), or None for a whole value. UnknownSchema for a reference without a value."""
    if not hdrs:
        return None
    for name, sid in hdrs:
        if name == headers.SCHEMA:
            if value is None or sid is None:
                raise UnknownSchema(f"a {headers.SCHEMA} header on a record without value")
            return sid  # type: ignore[no-any-return]
    return None


class SchemaStore:
    """Schemas by id, read from the feed's schemas topic as they are needed."""

    def __init__(self, feed: str, conf: dict[str, Any]) -> None:
        self.topic = topics.schemas(feed)
        self.conf = conf
        self._schemas: dict[bytes, bytes] = {}
        self._consumer: Any = None

    def restore(self, value: bytes | None, hdrs: list[Any] | None) -> bytes | None:
        """The change's whole value: ``value`` itself unless a ``crossfeed-schema`` header
        names the schema it was split from. UnknownSchema if the topic, read to its end,
        does not hold that schema; SchemasUnreadable if it could not be read to its end."""
        sid = reference(value, hdrs)
        return value if sid is None else debezium.join_envelope(self.get(sid), value or b"")

    def get(self, sid: bytes) -> bytes:
        found = self._schemas.get(sid)
        if found is None:
            if not self._read_on(sid):
                raise SchemasUnreadable(
                    f"{self.topic} not read to its end within {LOOKUP_TIMEOUT_S:.0f}s "
                    f"looking for schema {sid.decode(errors='replace')}"
                )
            found = self._schemas.get(sid)
            if found is None:
                raise UnknownSchema(
                    f"schema {sid.decode(errors='replace')} is not in {self.topic} "
                    "(was the topic deleted or its records removed?)"
                )
        return found

    def _read_on(self, wanted: bytes) -> bool:
        """Read the schemas topic on until ``wanted`` is there or its end is reached
        (True), or the time is up (False). The end is asked of the broker each time (an
        end-of-partition event may be stale: one from before the newer schemas)."""
        if self._consumer is None:
            self._consumer = clients.consumer(self.conf, **{"group.id": f"{self.topic}.reader"})
            self._consumer.assign([KafkaTP(self.topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + LOOKUP_TIMEOUT_S
        while time.monotonic() < deadline:
            msg = self._consumer.poll(0.2)
            if msg is None:
                if self._at_end():
                    return True
                continue
            if msg.error() is not None:
                log.warning("reading %s: %s", self.topic, msg.error())
                continue
            key, value = msg.key(), msg.value()
            if key is not None and value is not None:
                self._schemas[key] = value
                if key == wanted:
                    return True
        return False

    def _at_end(self) -> bool:
        """Read up to the partition's end as it is now: for this read_committed consumer
        the last stable offset (a schema of a transaction still open is not there yet, and
        no committed change refers to it)."""
        tp = KafkaTP(self.topic, 0)
        low, high = self._consumer.get_watermark_offsets(tp, timeout=5, cached=False)
        if high <= low:
            return True  # empty
        position = self._consumer.position([tp])[0].offset
        return bool(position >= high)

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
