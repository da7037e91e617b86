"""crossfeed/cdc/connector.py: the Debezium connector's configuration for --input debezium."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from crossfeed.cdc.connector import connector_config
from crossfeed.cli.main import app

pytestmark = pytest.mark.unit


def test_what_crossfeed_needs_is_set():
    config = connector_config("postgresql://app:s%40cret@db.example:6543/shop", "pg1")
    assert config["plugin.name"] == "pgoutput"
    assert config["provide.transaction.metadata"] == "true"
    assert config["heartbeat.interval.ms"] == "1000"
    assert config["poll.interval.ms"] == "100"  # a quiet database's change waits no longer
    assert config["extended.headers.enabled"] == "false"  # no context headers per event
    assert config["value.converter"] == "org.apache.kafka.connect.json.JsonConverter"
    assert config["value.converter.schemas.enable"] == "true"
    assert config["topic.prefix"] == "pg1"
    assert (config["database.hostname"], config["database.port"]) == ("db.example", "6543")
    assert (config["database.user"], config["database.password"]) == ("app", "s@cret")
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
