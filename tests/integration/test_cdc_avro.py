"""Debezium in Avro with the local stack's schema registry (Apicurio), and the connector's
database password by reference, read by the Connect worker's config providers."""

from __future__ import annotations

import contextlib
import json
import struct
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.dlq import ERROR_CLASS, ERROR_MESSAGE, STAGE
from crossfeed.kafka import clients
from crossfeed.local import captured, stack
from crossfeed.workload import sql_bank
from tests.integration.test_cdc import ACCOUNTS, _dead_letters, _start_feed, bank_across_kills
from tests.integration.test_cdc import pg_schema as pg_schema
from tests.support.cdc import CapturedDatabase

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
