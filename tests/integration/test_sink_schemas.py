"""services/sink/schemas.py against a real broker: a sink finds every schema the puller
committed, however late it was written, and never one of a transaction still open."""

from __future__ import annotations

import time

import pytest

from crossfeed.kafka import clients
from crossfeed.kafka import topics as kafka_topics
from crossfeed.services.sink import schemas as schemas_module
from crossfeed.services.sink.schemas import SchemaStore, UnknownSchema
from crossfeed.wire import debezium, headers, topics

pytestmark = pytest.mark.integration


def test_schemas_are_found_as_they_are_committed_and_values_come_back_whole(
    clusters, unique, producer_factory, monkeypatch
):
    monkeypatch.setattr(schemas_module, "LOOKUP_TIMEOUT_S", 4.0)
    feed = unique("schemas")
    kafka_topics.ensure_internal(clients.admin(clusters.b.config), topics.schemas(feed))
    producer = producer_factory(clusters.b, **{"transactional.id": f"{feed}-puller"})
    producer.init_transactions(30)

    def write(schema: bytes, commit: bool = True) -> bytes:
        sid = debezium.schema_id(schema)
        producer.begin_transaction()
        producer.produce(topics.schemas(feed), value=schema, key=sid, partition=0)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.flush(10)
        return sid

    store = SchemaStore(feed, clusters.b.config)
    try:
        a = write(b'{"name":"a"}')
        value = store.restore(b'{"op":"c"}', [(headers.SCHEMA, a)])
        assert value == b'{"schema":{"name":"a"},"payload":{"op":"c"}}'
        assert store.restore(b"whole", [("other", b"x")]) == b"whole"  # no reference
        # Written after the store read to the end once (and its consumer has seen that
        # end: an end-of-partition event from then must not end a later look-up).
        for n in range(3):
            time.sleep(1.5)
            later = write(b'{"name":"b%d"}' % n)
            assert store.get(later) == b'{"name":"b%d"}' % n
        # An id nobody wrote: UnknownSchema once the topic is read to its end (not
        # SchemasUnreadable, which is what running out of time says).
        with pytest.raises(UnknownSchema):
            store.get(b"0" * 32)
        # A schema of a transaction still open is not there yet (read_committed: the end is
        # the last stable offset); no committed change can refer to it. Once committed it is.
        pending = write(b'{"name":"c"}', commit=False)
        with pytest.raises(UnknownSchema):
            store.get(pending)
        producer.commit_transaction(30)
        assert store.get(pending) == b'{"name":"c"}'
        with pytest.raises(UnknownSchema):
            store.restore(None, [(headers.SCHEMA, a)])
    finally:
        store.close()
