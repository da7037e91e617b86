"""The quick look at a source cluster before a failover's final translation round: what
needs no socket (tests/integration/test_translation_reachability.py has the rest)."""

from __future__ import annotations

import pytest

from crossfeed.kafka.reachable import accepts_connections, bootstrap_addresses


def test_bootstrap_addresses_read_every_form_librdkafka_takes() -> None:
    assert bootstrap_addresses("127.0.0.1:19092, PLAINTEXT://b:9092,[::1]:9093") == [
        ("127.0.0.1", 19092),
        ("b", 9092),
        ("::1", 9093),
    ]


@pytest.mark.parametrize("bad", ["", "host", "host:", ":9092", "host:x"])
def test_bootstrap_addresses_reject_what_is_not_host_port(bad: str) -> None:
    with pytest.raises(ValueError, match="not host:port"):
        bootstrap_addresses(bad)


def test_no_time_means_not_reachable() -> None:
    assert not accepts_connections({"bootstrap.servers": "127.0.0.1:1"}, 0.0)
