"""crossfeed/cdc/connector.py: the Debezium connector's configuration for --input debezium."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from crossfeed.cdc.connector import (
    WORKER_CONFIG_PROVIDERS,
    connector_config,
    password_reference,
    registry_api_root,
)
from crossfeed.cli.main import app

pytestmark = pytest.mark.unit


def test_what_crossfeed_needs_is_set():
    config = connector_config("postgresql://app:${env:SHOP_PW}@db.example:6543/shop", "pg1")
    assert config["plugin.name"] == "pgoutput"
    assert config["provide.transaction.metadata"] == "true"
    assert config["heartbeat.interval.ms"] == "1000"
    assert config["poll.interval.ms"] == "100"  # a quiet database's change waits no longer
    assert config["extended.headers.enabled"] == "false"  # no context headers per event
    assert config["value.converter"] == "org.apache.kafka.connect.json.JsonConverter"
    assert config["value.converter.schemas.enable"] == "true"
    assert config["topic.prefix"] == "pg1"
    assert (config["database.hostname"], config["database.port"]) == ("db.example", "6543")
    assert (config["database.user"], config["database.password"]) == ("app", "${env:SHOP_PW}")
    assert config["database.dbname"] == "shop"
    assert config["slot.name"] == config["publication.name"] == "crossfeed_pg1"
    assert config["publication.autocreate.mode"] == "all_tables"
    assert "table.include.list" not in config


def test_tables_filter_the_publication():
    config = connector_config("postgresql://u@h/db", "p", tables=["public.a", "public.b"])
    assert config["table.include.list"] == "public.a,public.b"
    assert config["publication.autocreate.mode"] == "filtered"


@pytest.mark.parametrize(
    ("uri", "prefix", "says"),
    [
        ("postgresql://u@h/db", "bad prefix", "topic prefix"),
        ("mysql://u:pw@h/db", "p", "postgresql://USER"),
        ("postgresql://u:pw@h", "p", "names no database"),
    ],
)
def test_bad_input_is_named_and_no_password_is_shown(uri, prefix, says):
    with pytest.raises(ValueError, match=says) as err:
        connector_config(uri, prefix)
    assert "pw" not in str(err.value)


def test_cdc_config_prints_the_json_for_a_connect_cluster_of_ones_own():
    result = CliRunner().invoke(
        app, ["cdc", "config", "--prefix", "pg1", "--database", "postgresql://u@h:5/db"]
    )
    assert result.exit_code == 0, result.output
    assert '"plugin.name": "pgoutput"' in result.output
    bad = CliRunner().invoke(app, ["cdc", "config", "--prefix", "a b"])
    assert bad.exit_code == 1 and "topic prefix" in bad.output


@pytest.mark.parametrize(
    "uri",
    ["postgresql://app:s%40cret@db:5432/shop", "postgresql://app:${env:BAD-NAME}@db/shop"],
)
def test_a_password_in_clear_is_refused_and_not_shown(uri):
    with pytest.raises(ValueError, match=r"by\s+reference") as err:
        connector_config(uri, "pg1")
    assert "cret" not in str(err.value) and "BAD-NAME" not in str(err.value)


def test_password_references_become_the_workers_config_providers():
    assert password_reference("${env:PG_PW}") == "${env:PG_PW}"
    assert password_reference("${file:/run/secrets/pg}") == "${dir:/run/secrets:pg}"
    assert password_reference("${file:/pg}") == "${dir:/:pg}"
    providers = set(WORKER_CONFIG_PROVIDERS["config.providers"].split(","))
    assert providers == {"env", "dir"}
    for name in providers:
        assert f"config.providers.{name}.class" in WORKER_CONFIG_PROVIDERS
    # no password at all: trust or .pgpass on the database side, nothing in the config
    assert "database.password" not in connector_config("postgresql://u@h/db", "p")


def test_avro_writes_confluents_wire_format_against_the_registry():
    config = connector_config(
        "postgresql://u@h/db", "p", format="avro", registry_url="http://reg:8080/apis/ccompat/v7"
    )
    for side in ("key", "value"):
        prefix = f"{side}.converter"
        assert config[prefix] == "io.apicurio.registry.utils.converter.AvroConverter"
        assert config[f"{prefix}.apicurio.registry.url"] == "http://reg:8080/apis/registry/v2"
        assert config[f"{prefix}.apicurio.registry.as-confluent"] == "true"
        assert config[f"{prefix}.apicurio.registry.headers.enabled"] == "false"
        assert config[f"{prefix}.apicurio.registry.use-id"] == "contentId"
        assert f"{prefix}.schemas.enable" not in config
    assert config["provide.transaction.metadata"] == "true"
    with pytest.raises(ValueError, match="registry"):
        connector_config("postgresql://u@h/db", "p", format="avro")
    with pytest.raises(ValueError, match="json or avro"):
        connector_config("postgresql://u@h/db", "p", format="protobuf")
    assert registry_api_root("http://r:1/apis/registry/v2/") == "http://r:1"
    assert registry_api_root("http://r:1") == "http://r:1"


def test_cdc_config_takes_the_format_and_a_password_reference():
    result = CliRunner().invoke(
        app,
        [
            "cdc",
            "config",
            "--prefix",
            "pg1",
            "--database",
            "postgresql://app@h:5/db",
            "--password",
            "${file:/run/secrets/pg}",
            "--format",
            "avro",
            "--registry",
            "http://reg:8080",
        ],
    )
    assert result.exit_code == 0, result.output
    assert '"database.password": "${dir:/run/secrets:pg}"' in result.output
    assert '"value.converter.apicurio.registry.url": "http://reg:8080/apis/registry/v2"' in (
        result.output
    )
    clear = CliRunner().invoke(
        app, ["cdc", "config", "--prefix", "pg1", "--database", "postgresql://a:hunter2@h/db"]
    )
    assert clear.exit_code == 1 and "hunter2" not in clear.output
