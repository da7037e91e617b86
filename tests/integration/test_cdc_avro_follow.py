"""Schemas follow the data: records in Confluent's wire format copied into dc-b (a mirror
feed, an ordered feed of Debezium in Avro into a Kafka topic) decode on dc-b with dc-b's
schema registry alone, dc-a's not answering (crossfeed/cdc/schema_copy.py)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import struct
import time
import urllib.request
import uuid
from typing import Any

import fastavro
import pytest
from confluent_kafka import KafkaException

from crossfeed.kafka import clients
from crossfeed.local import stack
from crossfeed.workload import sql_bank
from tests.integration.test_cdc import ACCOUNTS, _start_feed
from tests.integration.test_cdc_avro import _get
from tests.support.verify import read_many

pytestmark = [pytest.mark.integration]


def _register(registry_url: str, subject: str, schema: dict[str, Any]) -> int:
    body = json.dumps({"schema": json.dumps(schema)}).encode()
    req = urllib.request.Request(
        f"{registry_url}/subjects/{subject}/versions",
        data=body,
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"},
    )
    with urllib.request.urlopen(req, timeout=10) as answer:
        return int(json.loads(answer.read())["id"])


def _confluent(sid: int, schema: dict[str, Any], record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + struct.pack(">I", sid) + out.getvalue()


class ConfluentDeserializer:
    """What a consumer with Confluent's wire-format deserializer does: the schema by id
    from the registry it is given (once), the body with fastavro."""

    def __init__(self, registry_url: str) -> None:
        self.url = registry_url
        self.schemas: dict[int, Any] = {}

    def __call__(self, value: bytes) -> Any:
        assert value[0] == 0
        (sid,) = struct.unpack(">I", value[1:5])
        if sid not in self.schemas:
            found = _get(f"{self.url}/schemas/ids/{sid}")
            self.schemas[sid] = fastavro.parse_schema(json.loads(found["schema"]))
        return fastavro.schemaless_reader(io.BytesIO(value[5:]), self.schemas[sid], None)


ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [{"name": "id", "type": "long"}, {"name": "item", "type": "string"}],
}
ORDER_V2 = ORDER_V1 | {
    "fields": [*ORDER_V1["fields"], {"name": "cents", "type": "long", "default": 0}]
}
ORDER_V3 = ORDER_V2 | {
    "fields": [*ORDER_V2["fields"], {"name": "note", "type": "string", "default": ""}]
}


def _copies(clusters: Any, topic: str, wanted: int, timeout_s: float) -> list[Any]:
    """The topic's records on dc-b, once there are ``wanted`` or ``timeout_s`` is up."""
    deadline = time.monotonic() + timeout_s
    copied: list[Any] = []
    while time.monotonic() < deadline and len(copied) < wanted:
        with contextlib.suppress(KafkaException):  # not created on dc-b yet
            found = read_many(clusters.b.config, [topic])[topic]
            copied = [r for part in found.values() for r in part]
        time.sleep(1)
    return copied


@pytest.mark.e2e
def test_schemas_follow_a_mirrored_avro_topic_and_decode_on_dc_b_without_dc_a(
    clusters, cdc_stack, services, topic_factory
):
    """A mirror feed of Avro records (Confluent's wire format) keeps dc-b's registry a copy
    of dc-a's, ids kept; after dc-a and its registry are lost, a consumer on dc-b decodes
    every record with dc-b's registry alone."""
    registry_a, started_b = stack.registry(), stack.up_registry_b()
    registry_b = stack.registry_b()
    try:
        topic = topic_factory(clusters.a, partitions=2)
        v1 = _register(registry_a.url, f"{topic}-value", ORDER_V1)
        producer = clients.producer(clusters.a.config)
        sent = []
        for n in range(100):
            record = {"id": n, "item": f"item-{n}"}
            sent.append(record)  # read with its writer schema: no cents
            producer.produce(topic, key=b"%d" % n, value=_confluent(v1, ORDER_V1, record))
        producer.flush(10)
        config = {
            "schema.registry.url": registry_a.url,
            "schema.registry.target_url": registry_b.url,
        }
        feed = services.start_feed("avro-mirror", clusters, [topic], config=config)
        v2 = _register(registry_a.url, f"{topic}-value", ORDER_V2)  # a version after the start
        for n in range(100, 200):
            record = {"id": n, "item": f"item-{n}", "cents": n * 10}
            sent.append(record)
            producer.produce(topic, key=b"%d" % n, value=_confluent(v2, ORDER_V2, record))
        producer.flush(10)
        assert v1 != v2
        copied = _copies(clusters, topic, len(sent), 90)
        assert len(copied) == len(sent), feed.logs()
        # A new version while dc-a's registry does not answer: its records wait on dc-a
        # (never on dc-b without their schema), and follow once the registry is back.
        # a schema no earlier run registered (the registries dedupe equal content: an id
        # from a run before would be on dc-b's registry already)
        order_v3 = ORDER_V3 | {"namespace": f"shop.run_{uuid.uuid4().hex[:12]}"}
        v3 = _register(registry_a.url, f"{topic}-value", order_v3)
        os.kill(registry_a.pid() or 0, signal.SIGSTOP)
        try:
            for n in range(200, 220):
                record = {"id": n, "item": f"item-{n}", "cents": n, "note": "v3"}
                sent.append(record)
                producer.produce(topic, key=b"%d" % n, value=_confluent(v3, order_v3, record))
            producer.flush(10)
            held = _copies(clusters, topic, len(sent), 25)
            assert len(held) == len(copied), "records reached dc-b before their schema"
        finally:
            os.kill(registry_a.pid() or 0, signal.SIGCONT)
        copied = _copies(clusters, topic, len(sent), 120)
        assert len(copied) == len(sent), feed.logs()
        # dc-a and its registry lost: the registry paused (it keeps its in-memory schemas
        # for the tests after this one), dc-a's broker killed
        os.kill(registry_a.pid() or 0, signal.SIGSTOP)
        clusters.stop("dc-a")
        try:
            feed.stop_all(hard=True)
            decode = ConfluentDeserializer(registry_b.url)
            decoded = sorted((decode(r.value) for r in copied), key=lambda r: r["id"])
            assert decoded == sent
            assert set(decode.schemas) == {v1, v2, v3}, "the ids are dc-a's, kept"
        finally:
            os.kill(registry_a.pid() or 0, signal.SIGCONT)
            clusters.start("dc-a")
    finally:
        if started_b:
            registry_b.stop()


@pytest.mark.spark
@pytest.mark.e2e
def test_debezium_avro_into_a_kafka_topic_decodes_on_dc_b_with_dc_bs_registry_alone(
    clusters, captured_db, services, unique
):
    """An ordered feed of Debezium in Avro into kafka://dc-b/TOPIC with the schemas
    following into dc-b's registry: a consumer on dc-b decodes every row with dc-b's
    registry alone while dc-a's does not answer; the bytes are Debezium's."""
    db = captured_db
    started_b = stack.up_registry_b()
    registry_a, registry_b = stack.registry(), stack.registry_b()
    try:
        sql_bank.create(db.uri, ACCOUNTS)
        db.register(heartbeat_ms=500, format="avro", registry_url=registry_a.url)
        db.wait_running()
        target = unique("cdc-avro-ledger")
        config = {
            "schema.registry.url": registry_a.url,
            "schema.registry.target_url": registry_b.url,
        }
        feed = _start_feed(
            services, clusters, db, "", f"kafka://{clusters.b.alias}/{target}", config=config
        )
        workload = sql_bank.Transfers(db.uri, ACCOUNTS, sessions=3, total=200).start()
        workload.join(120)
        assert not workload.errors and workload.done == 200
        expected = ACCOUNTS + 3 * 200
        arrived = read_many(clusters.b.config, [target], expect=expected, timeout_s=180)
        assert target in arrived, f"nothing reached {target}\n{feed.logs()}"
        records = [r for part in arrived[target].values() for r in part]
        assert len(records) == expected, f"{len(records)} of {expected}\n{feed.logs()}"
        source = read_many(
            clusters.a.config, [f"{db.prefix}.public.accounts", f"{db.prefix}.public.transfers"]
        )
        source_records = [r for topic in source.values() for part in topic.values() for r in part]
        assert sorted(r.value for r in records) == sorted(r.value for r in source_records)
        os.kill(registry_a.pid() or 0, signal.SIGSTOP)  # dc-a's registry does not answer
        try:
            decode = ConfluentDeserializer(registry_b.url)
            rows = [decode(r.value)["after"] for r in records]
            keys = [decode(r.key) for r in records]
        finally:
            os.kill(registry_a.pid() or 0, signal.SIGCONT)
        balances = {row["id"]: row["balance"] for row in rows if "balance" in row}
        assert balances == dict(sql_bank.rows(db.uri, "public", "accounts", ("id", "balance")))
        ledger = sorted(row["id"] for row in rows if "src" in row)
        assert ledger == [r[0] for r in sql_bank.rows(db.uri, "public", "transfers", ("id",))]
        assert all(set(k) == {"id"} for k in keys)
        feed.assert_running()
    finally:
        if started_b:
            registry_b.stop()
