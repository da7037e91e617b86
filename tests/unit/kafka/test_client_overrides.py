"""Per-client overrides of a cluster's properties (``<alias>.consumer.*`` and friends),
MirrorMaker 2 style: the pure rules, the configuration file forms, and the clients
crossfeed builds from them."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.config import ConfigError, load_settings
from crossfeed.kafka import client_overrides, clients
from crossfeed.services.sorter.sparkconf import kafka_options

pytestmark = pytest.mark.unit

PROPS = {
    "bootstrap.servers": "127.0.0.1:19092",
    "client.id": "everyone",
    "consumer.client.id": "readers",
    "consumer.fetch.max.bytes": "1048576",
    "producer.linger.ms": "20",
    "admin.request.timeout.ms": "7000",
}


def test_a_client_gets_the_shared_properties_then_its_own_and_none_of_the_others():
    assert client_overrides.for_client(PROPS, "consumer") == {
        "bootstrap.servers": "127.0.0.1:19092",
        "client.id": "readers",
        "fetch.max.bytes": "1048576",
    }
    assert client_overrides.for_client(PROPS, "producer") == {
        "bootstrap.servers": "127.0.0.1:19092",
        "client.id": "everyone",
        "linger.ms": "20",
    }
    assert client_overrides.for_client(PROPS, "admin") == {
        "bootstrap.servers": "127.0.0.1:19092",
        "client.id": "everyone",
        "request.timeout.ms": "7000",
    }


def test_an_unknown_client_kind_is_refused():
    with pytest.raises(ValueError, match="streams"):
        client_overrides.for_client(PROPS, "streams")


names = st.from_regex(r"[a-z]{1,8}(\.[a-z]{1,8}){0,2}", fullmatch=True)
kinds = st.sampled_from(client_overrides.CLIENT_KINDS)


@given(
    shared=st.dictionaries(names, st.text(max_size=5), max_size=6),
    own=st.dictionaries(names, st.text(max_size=5), max_size=6),
    kind=kinds,
)
def test_own_properties_always_win_and_never_leak_to_other_kinds(shared, own, kind):
    props = {k: v for k, v in shared.items() if client_overrides.split_kind(k)[0] is None}
    props.update({f"{kind}.{k}": v for k, v in own.items()})
    mine = client_overrides.for_client(props, kind)
    for key, value in own.items():
        assert mine[key] == value
    for key, value in props.items():
        if client_overrides.split_kind(key)[0] is None and key not in own:
            assert mine[key] == value
    for other in client_overrides.CLIENT_KINDS:
        if other != kind:
            theirs = client_overrides.for_client(props, other)
            for key in own:
                assert theirs.get(key) == props.get(key)  # the shared value, or none
    assert not any(client_overrides.split_kind(k)[0] for k in mine)


def _settings(isolated, text):
    (isolated / "crossfeed.yaml").write_text(text)
    return load_settings()


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CROSSFEED_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CROSSFEED_CONFIG", raising=False)
    return tmp_path


def test_the_flat_and_the_nested_forms_mean_the_same(isolated):
    flat = _settings(
        isolated,
        "dc-a.bootstrap.servers: 127.0.0.1:19092\n"
        "dc-a.consumer.fetch.max.bytes: 1048576\n"
        "dc-a.producer.linger.ms: 20\n",
    )
    nested = _settings(
        isolated,
        "clusters:\n"
        "  dc-a:\n"
        "    bootstrap.servers: 127.0.0.1:19092\n"
        "    consumer:\n"
        "      fetch.max.bytes: 1048576\n"
        "    producer: {linger.ms: 20}\n",
    )
    expected = {
        "bootstrap.servers": "127.0.0.1:19092",
        "consumer.fetch.max.bytes": "1048576",
        "producer.linger.ms": "20",
    }
    assert flat.cluster("dc-a").properties == expected
    assert nested.cluster("dc-a").properties == expected


def test_a_prefix_that_names_no_property_is_refused_with_the_key(isolated):
    with pytest.raises(ConfigError, match=re.escape("'consumer.'")):
        _settings(isolated, "dc-a.bootstrap.servers: h:1\ndc-a.consumer.: x\n")


def test_crossfeeds_clients_take_their_overrides_and_keep_what_guarantees_need():
    conf = {  # no bootstrap.servers: the clients below are built, and connect nowhere
        "consumer.enable.auto.commit": "true",  # ignored: crossfeed commits itself
        "consumer.isolation.level": "read_uncommitted",
        "consumer.fetch.queue.backoff.ms": "500",  # a crossfeed default: tunable
        "producer.linger.ms": "50",
        "producer.enable.idempotence": "false",
    }
    merged = clients._merge(
        conf,
        {"isolation.level": "read_committed", "enable.auto.commit": False},
        "consumer",
        {"fetch.queue.backoff.ms": 10},
    )
    assert merged["isolation.level"] == "read_committed"
    assert merged["enable.auto.commit"] is False
    assert merged["fetch.queue.backoff.ms"] == "500"
    assert not any(k.startswith(("producer.", "consumer.")) for k in merged)
    made = clients.producer(conf)  # librdkafka refuses unknown properties: none leak
    made.flush(0)
    reader = clients.consumer(conf, **{"group.id": "g"})
    reader.close()


def test_sparks_kafka_source_reads_with_the_consumer_overrides():
    options = kafka_options(
        {
            "bootstrap.servers": "127.0.0.1:19092",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "everyone",
            "sasl.password": "shared",
            "consumer.sasl.username": "reader",
            "consumer.sasl.password": "secret",
            "producer.sasl.username": "writer",
        },
        {},
    )
    assert 'username="reader"' in options["kafka.sasl.jaas.config"]
    assert 'password="secret"' in options["kafka.sasl.jaas.config"]
