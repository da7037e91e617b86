"""Why a client cannot talk to a cluster, in one line an operator can act on.

librdkafka retries a failed TLS handshake or SASL login forever and, to its application,
only says that all brokers are down; the reason is in its error callbacks and log lines
("SASL authentication error: ...", "certificate verify failed", "connection closed by
peer ... in state APIVERSION_QUERY"). :func:`diagnose` reads those texts and names the
cluster, the listener and the likely fix. Pure: the texts come from
:func:`crossfeed.kafka.clients.probe` or a running client's error callback.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

_MECHANISMS = re.compile(r"supported mechanisms: ([A-Z0-9_,\- ]+)")


def _where(alias: str, conf: Mapping[str, Any]) -> str:
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    return f"cluster {alias} (listener {conf.get('bootstrap.servers', '?')}, {protocol})"


def _cause(texts: list[str], conf: Mapping[str, Any], alias: str) -> str | None:
    """The likely cause and fix for the first recognised failure among ``texts``."""
    joined = "\n".join(texts)
    protocol = str(conf.get("security.protocol", "PLAINTEXT")).upper()
    if "Unsupported SASL mechanism" in joined:
        offered = _MECHANISMS.search(joined)
        names = offered.group(1).strip() if offered else "see the broker's sasl.enabled.mechanisms"
        return (
            f"the broker does not offer SASL mechanism {conf.get('sasl.mechanism', 'GSSAPI')}; "
            f"set {alias}.sasl.mechanism to one it offers ({names})"
        )
    if "SASL authentication error" in joined or "Authentication failed" in joined:
        user = conf.get("sasl.username", "?")
        return (
            f"SASL authentication failed for user {user!r} "
            f"({conf.get('sasl.mechanism', 'GSSAPI')}): wrong password, or no such user on "
            f"the cluster; check {alias}.sasl.username and {alias}.sasl.password"
        )
    if "certificate verify failed" in joined:
        if "mismatch" in joined:
            return (
                "the broker's TLS certificate does not name the host connected to; use a "
                f"host name from the certificate in {alias}.bootstrap.servers"
            )
        return (
            "the broker's TLS certificate is not signed by a CA this client trusts; set "
            f"{alias}.ssl.ca.location to the PEM file of the CA that signed it"
        )
    if "PLAINTEXT broker listener" in joined or (
        "SSL connection closed by peer" in joined and "SSL_HANDSHAKE" in joined
    ):
        return (
            "the listener does not speak TLS; use its TLS port, or set "
            f"{alias}.security.protocol to PLAINTEXT or SASL_PLAINTEXT if that is intended"
        )
    closed_at_first_request = "closed by peer" in joined and "APIVERSION_QUERY" in joined
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT") and (
        closed_at_first_request or "connecting to a SSL listener" in joined
    ):
        tls = "SASL_SSL" if protocol == "SASL_PLAINTEXT" else "SSL or SASL_SSL"
        return (
            "the listener closed the connection at the first request: it most likely "
            f"expects TLS; set {alias}.security.protocol to {tls} (and {alias}.ssl.ca.location)"
        )
    handshake = next((t for t in texts if "SSL handshake failed" in t), None)
    if handshake is not None:
        reason = handshake.split("SSL handshake failed:", 1)[1].split(" (after ")[0].strip()
        return f"TLS handshake failed ({reason}); check {alias}.ssl.* against the listener"
    return None


def diagnose(alias: str, conf: Mapping[str, Any], texts: Iterable[str]) -> str | None:
    """One line naming the cluster, its listener and the likely fix, when ``texts`` (a
    client's error and log messages) show a security misconfiguration; None when they
    show nothing recognisable (a cluster that is down, or no failure at all)."""
    cause = _cause([str(t) for t in texts], conf, alias)
    # One line whatever the texts held (a handshake reason is quoted from them).
    return " ".join(f"{_where(alias, conf)}: {cause}".split()) if cause else None
