"""Debezium in Avro with the local stack's schema registry (Apicurio), and the connector's
database password by reference, read by the Connect worker's config providers."""

from __future__ import annotations

import contextlib
import json
import struct
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from crossfeed.cdc import captured, connector
from crossfeed.cdc.connect_api import ConnectError
from crossfeed.kafka import clients
from crossfeed.local import stack
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
