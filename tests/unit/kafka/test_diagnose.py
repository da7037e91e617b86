"""diagnose: librdkafka's failure texts (as real brokers produced them) become one line
naming the cluster, its listener and the likely fix."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crossfeed.kafka.diagnose import diagnose

SECURE = {
    "bootstrap.servers": "127.0.0.1:41894",
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.username": "app",
    "sasl.password": "s3cret",
}
PLAIN = {"bootstrap.servers": "127.0.0.1:41894"}

# Seen from librdkafka 2.x against Kafka 4.3 (tests/integration/test_secured_clusters.py).
WRONG_PASSWORD = (
    "sasl_ssl://127.0.0.1:41894/bootstrap: SASL authentication error: Authentication failed "
    "during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512 "
    "(after 314ms in state AUTH_REQ)"
)
UNKNOWN_CA = (
    "sasl_ssl://127.0.0.1:41894/bootstrap: SSL handshake failed: error:0A000086:SSL "
    "routines::certificate verify failed: broker certificate could not be verified, verify "
    "that ssl.ca.location is correctly configured or root CA certificates are installed "
    "(install ca-certificates package) (after 10ms in state SSL_HANDSHAKE)"
)
PLAIN_AGAINST_TLS = (
    "FAIL [rdkafka#producer-10] [thrd:127.0.0.1:41894/bootstrap]: 127.0.0.1:41894/bootstrap: "
    "Disconnected: connection closed by peer: receive 0 after POLLIN (after 0ms in state "
    "APIVERSION_QUERY)"
)
TLS_AGAINST_PLAIN = (
    "sasl_ssl://127.0.0.1:41892/bootstrap: SSL handshake failed: Disconnected: SSL "
    "connection closed by peer: connecting to a PLAINTEXT broker listener? (after 0ms in "
    "state SSL_HANDSHAKE)"
)
WRONG_MECHANISM = (
    "sasl_ssl://127.0.0.1:41894/bootstrap: SASL PLAIN mechanism handshake failed: Broker: "
    "Unsupported SASL mechanism: broker's supported mechanisms: SCRAM-SHA-512 (after 301ms "
    "in state AUTH_HANDSHAKE)"
)
DOWN = [
    "sasl_ssl://127.0.0.1:9/bootstrap: Connect to ipv4#127.0.0.1:9 failed: Connection "
    "refused (after 2ms in state CONNECT)",
    "1/1 brokers are down",
]


def test_wrong_password_names_user_cluster_listener_and_the_settings_to_check() -> None:
    line = diagnose("dc-a", SECURE, ["1/1 brokers are down", WRONG_PASSWORD])
    assert line == (
        "cluster dc-a (listener 127.0.0.1:41894, SASL_SSL): SASL authentication failed for "
        "user 'app' (SCRAM-SHA-512): wrong password, or no such user on the cluster; check "
        "dc-a.sasl.username and dc-a.sasl.password"
    )
    assert "s3cret" not in line


def test_unknown_ca_points_at_ssl_ca_location() -> None:
    line = diagnose("dc-b", SECURE, [UNKNOWN_CA])
    assert line is not None
    assert line.startswith("cluster dc-b (listener 127.0.0.1:41894, SASL_SSL): ")
    assert "not signed by a CA this client trusts" in line
    assert "set dc-b.ssl.ca.location" in line


def test_plaintext_against_tls_asks_for_a_tls_protocol() -> None:
    line = diagnose("dc-a", PLAIN, [PLAIN_AGAINST_TLS, "1/1 brokers are down"])
    assert line is not None
    assert "(listener 127.0.0.1:41894, PLAINTEXT)" in line
    assert "expects TLS; set dc-a.security.protocol to SSL or SASL_SSL" in line
    sasl_plain = {**SECURE, "security.protocol": "SASL_PLAINTEXT"}
    assert "security.protocol to SASL_SSL " in (
        diagnose("dc-a", sasl_plain, [PLAIN_AGAINST_TLS]) or ""
    )


def test_a_closed_connection_is_not_blamed_on_tls_when_tls_is_already_on() -> None:
    assert diagnose("dc-a", SECURE, [PLAIN_AGAINST_TLS]) is None


def test_tls_against_a_plaintext_listener() -> None:
    line = diagnose("dc-a", SECURE, [TLS_AGAINST_PLAIN])
    assert line is not None and "the listener does not speak TLS" in line


def test_unsupported_mechanism_lists_what_the_broker_offers() -> None:
    line = diagnose("dc-a", {**SECURE, "sasl.mechanism": "PLAIN"}, [WRONG_MECHANISM])
    assert line is not None
    assert "does not offer SASL mechanism PLAIN" in line
    assert "(SCRAM-SHA-512)" in line


def test_a_cluster_that_is_down_is_not_a_misconfiguration() -> None:
    assert diagnose("dc-a", SECURE, DOWN) is None
    assert diagnose("dc-a", SECURE, []) is None


@given(st.lists(st.text(max_size=200), max_size=5))
def test_any_text_gives_none_or_one_line_naming_the_cluster(texts: list[str]) -> None:
    line = diagnose("dc-x", SECURE, texts)
    assert line is None or (line.startswith("cluster dc-x (listener ") and "\n" not in line)
