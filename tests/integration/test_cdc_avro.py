"""Debezium in Avro with the local stack's schema registry (Apicurio), and the connector's
database password by reference, read by the Connect worker's config providers."""

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
from pathlib import Path
from typing import Any

import fastavro
import psycopg
import pytest
from confluent_kafka import KafkaException
from psycopg import sql

from crossfeed.cdc import captured, connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.dlq import ERROR_CLASS, ERROR_MESSAGE, STAGE
from crossfeed.kafka import clients
from crossfeed.local import stack
from crossfeed.workload import sql_bank
from tests.integration.test_cdc import ACCOUNTS, _dead_letters, _start_feed, bank_across_kills
from tests.integration.test_cdc import pg_schema as pg_schema
from tests.support.cdc import CapturedDatabase
from tests.support.verify import read_many

pytestmark = [pytest.mark.integration]


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.loads(answer.read())


def _first_record(bootstrap: str, topic: str, timeout_s: float = 60.0) -> Any:
    consumer = clients.consumer(
        {"bootstrap.servers": bootstrap},
        **{"group.id": f"t-{uuid.uuid4().hex}", "auto.offset.reset": "earliest"},
    )
    try:
        consumer.subscribe([topic])
        for _ in range(int(timeout_s)):
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                return msg
        raise AssertionError(f"nothing on {topic} within {timeout_s:.0f}s")
    finally:
        consumer.close()


def test_debezium_writes_confluents_wire_format_with_schemas_in_the_registry(
    clusters, captured_db: CapturedDatabase
):
    db = captured_db
    registry = stack.registry()
    assert any(p.name == "registry" and p.answering for p in stack.status())
    with psycopg.connect(db.uri, autocommit=True) as conn:
        conn.execute("CREATE TABLE items (id int PRIMARY KEY, name text)")
        conn.execute("INSERT INTO items VALUES (1, 'one')")
    db.register(format="avro", registry_url=registry.url)
    db.wait_running()
    msg = _first_record(clusters.a.bootstrap, f"{db.prefix}.public.items")
    for raw, subject in ((msg.value(), "value"), (msg.key(), "key")):
        assert raw[0] == 0, "Confluent's magic byte"
        (schema_id,) = struct.unpack(">I", raw[1:5])
        found = _get(f"{registry.url}/schemas/ids/{schema_id}")
        latest = _get(f"{registry.url}/subjects/{db.prefix}.public.items-{subject}/versions/latest")
        assert latest["id"] == schema_id
        assert json.loads(found["schema"]) == json.loads(latest["schema"])
    assert not msg.headers(), "the schema's id is in the value, not in headers"


def test_the_connectors_password_is_a_reference_the_worker_reads(
    cdc_stack: str, captured_db: CapturedDatabase, tmp_path: Path
):
    """A role that may only log in with its password (scram in pg_hba ahead of trust): the
    connector runs with ${file:} (the worker's dir provider reads it), the config Connect
    stores and shows holds only the reference, and a wrong password is refused."""
    db = captured_db
    role = f"cf_{uuid.uuid4().hex[:8]}"
    hba = stack.postgres.source().data / "pg_hba.conf"
    before = hba.read_text()
    secret = tmp_path / "pg-password"
    secret.write_text(f"pw-{uuid.uuid4().hex}")  # Connect reads it verbatim: no newline
    with psycopg.connect(db.admin_uri, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN SUPERUSER REPLICATION PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(secret.read_text().strip())
            )
        )
    hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n" + before)
    try:
        with psycopg.connect(db.admin_uri, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute(f'GRANT ALL ON DATABASE "{db.name}" TO {role}')
        host = db.uri.split("@", 1)[1]
        uri = f"postgresql://{role}@{host}"
        with pytest.raises(psycopg.OperationalError):  # the password is really asked for
            psycopg.connect(uri).close()
        password = f"${{file:{secret}}}"
        config = connector.connector_config(
            uri.replace(f"{role}@", f"{role}:{password.replace('/', '%2F')}@"), db.prefix
        )
        assert config["database.password"] == f"${{dir:{tmp_path}:pg-password}}"
        connector.register(cdc_stack, db.name, config)
        connector.wait_running(cdc_stack, db.name)
        stored = _get(f"{cdc_stack}/connectors/{db.name}/config")
        assert stored["database.password"] == config["database.password"]
        assert secret.read_text().strip() not in json.dumps(stored)
        connector.remove(cdc_stack, db.name)
        wrong = tmp_path / "wrong"
        wrong.write_text("not-the-password")
        config["database.password"] = f"${{dir:{tmp_path}:wrong}}"
        config["slot.name"] = config["publication.name"] = f"{config['slot.name']}_w"
        with pytest.raises(ConnectError, match="password authentication failed"):
            connector.register(cdc_stack, db.name, config)
    finally:
        hba.write_text(before)
        with contextlib.suppress(ConnectError):
            connector.remove(cdc_stack, db.name)
        with psycopg.connect(db.uri, autocommit=True) as conn:
            conn.execute(f"DROP OWNED BY {role}")  # its publication, its grants
        with psycopg.connect(db.admin_uri, autocommit=True) as conn:
            conn.execute("SELECT pg_reload_conf()")
            captured.drop_slots(conn, [db.slot])
            conn.execute(f"DROP ROLE IF EXISTS {role}")


def _avro_feed(services: Any, clusters: Any, db: CapturedDatabase, schema: str) -> Any:
    """The connector in Avro against the local registry, and the feed reading it."""
    db.register(heartbeat_ms=500, format="avro", registry_url=stack.registry().url)
    db.wait_running()
    config = {"schema.registry.url": stack.registry().url}
    return _start_feed(services, clusters, db, schema, config=config)


@pytest.mark.spark
@pytest.mark.e2e
def test_sql_bank_in_avro_arrives_whole_across_kills_and_a_new_column(
    clusters, captured_db, pg_schema, services
):
    db = captured_db
    total = sql_bank.create(db.uri, ACCOUNTS)
    feed = _avro_feed(services, clusters, db, pg_schema)
    bank_across_kills(clusters, db, pg_schema, feed, total, transfers=4_000)
    # the column added mid-run registered a new version of the table's value schema
    subject = f"{stack.registry().url}/subjects/{db.prefix}.public.transfers-value/versions"
    versions = [_get(f"{subject}/{v}")["schema"] for v in _get(subject)]
    assert len(versions) >= 2
    assert '"note"' not in versions[0] and '"note"' in versions[-1]


TYPES_TABLE = """
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE things (
    id integer PRIMARY KEY, small smallint, big bigint, f4 real, f8 double precision,
    flag boolean, name text, tag varchar(20), raw bytea, amount numeric(12, 2), free numeric,
    day date, tod time, ts timestamp, tz timestamptz, ref uuid, doc jsonb, feeling mood
)"""
TYPES_ROWS = [
    (
        1,
        3,
        2**40,
        1.5,
        2.25,
        True,
        'a "quoted" name',
        "tag",
        b"\x00\xff",
        "-10.50",
        "123.456789",
        "2022-01-08",
        "01:02:03.000004",
        "2023-11-14 22:13:20.123456",
        "2026-11-27 10:00:00.5+00",
        "2c078ecc-4ae6-413d-99e0-74fe9986ae8d",
        '{"a": [1, 2]}',
        "happy",
    ),
    (2, *([None] * 17)),
    (
        3,
        -32768,
        -(2**63),
        -0.25,
        1e300,
        False,
        "",
        "",
        b"",
        "0.00",
        "-0.5",
        "1970-01-01",
        "23:59:59.999999",
        "1999-12-31 23:59:59",
        "2000-01-01 00:00:00+05",
        "00000000-0000-0000-0000-000000000000",
        "[]",
        "sad",
    ),
]
TYPE_COLUMNS = (
    "id", "small", "big", "f4", "f8", "flag", "name", "tag", "raw", "amount", "free", "day",
    "tod", "ts", "tz", "ref", "doc", "feeling",
)  # fmt: skip


@pytest.mark.spark
@pytest.mark.e2e
def test_every_mapped_type_round_trips_in_avro_and_an_unknown_schema_id_is_a_dead_letter(
    clusters, captured_db, pg_schema, services
):
    db = captured_db
    with psycopg.connect(db.uri, autocommit=True) as conn:
        conn.execute(TYPES_TABLE)
        placeholders = ", ".join(["%s"] * len(TYPE_COLUMNS))
        conn.cursor().executemany(f"INSERT INTO things VALUES ({placeholders})", TYPES_ROWS[:1])
    feed = _avro_feed(services, clusters, db, pg_schema)  # row 1 by the snapshot
    with psycopg.connect(db.uri, autocommit=True) as conn:  # rows 2, 3 streamed
        conn.cursor().executemany(f"INSERT INTO things VALUES ({placeholders})", TYPES_ROWS[1:])
    # A record whose schema id the registry does not know, on a captured topic
    producer = clients.producer(clusters.a.config)
    producer.produce(
        f"{db.prefix}.public.things", value=b"\x00" + (999_999).to_bytes(4, "big") + b"junk",
        key=b"junk",
    )  # fmt: skip
    producer.flush(10)
    with psycopg.connect(db.uri, autocommit=True) as conn:  # and a change after it
        conn.execute("UPDATE things SET name = 'after the bad one' WHERE id = 2")
    deadline = time.monotonic() + 180
    source: list[Any] = []
    target: list[Any] = []
    while time.monotonic() < deadline:
        source = sql_bank.rows(db.uri, "public", "things", TYPE_COLUMNS)
        with contextlib.suppress(psycopg.errors.UndefinedTable):
            target = sql_bank.rows(clusters.postgres_uri, pg_schema, "things", TYPE_COLUMNS)
        if source == target:
            break
        time.sleep(1)
    assert target == source, f"{feed.logs()}"
    letters: list[Any] = []
    while not letters and time.monotonic() < deadline + 30:
        letters = _dead_letters(clusters, feed.name)
        time.sleep(0.5)
    assert len(letters) == 1, letters
    letter = letters[0]
    assert letter.header(ERROR_CLASS) == b"UnknownSchema"
    assert b"999999" in (letter.header(ERROR_MESSAGE) or b"")
    assert letter.header(STAGE) == b"sink"
    assert letter.value == b"\x00" + (999_999).to_bytes(4, "big") + b"junk"
    feed.assert_running()


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
        deadline = time.monotonic() + 90
        copied: list[Any] = []
        while time.monotonic() < deadline and len(copied) < len(sent):
            with contextlib.suppress(KafkaException):  # not created on dc-b yet
                found = read_many(clusters.b.config, [topic])[topic]
                copied = [r for part in found.values() for r in part]
            time.sleep(1)
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
            assert set(decode.schemas) == {v1, v2}, "the ids are dc-a's, kept"
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
