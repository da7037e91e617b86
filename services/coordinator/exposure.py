"""Whether the REST API may listen where it is asked to (pure).

On a loopback address only this machine reaches it. Anywhere else, mutating calls
(create, remove, failover) would be open to the network unless an API token is set, so
the coordinator refuses to start that way unless the operator says ``--insecure``.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def refusal(host: str, token: str | None, insecure: bool) -> str | None:
    """Why the REST API must not listen on ``host`` (None: it may)."""
    if token or insecure or is_loopback(host):
        return None
    return (
        f"the REST API would listen on {host} without an API token, open to anyone who "
        "reaches it: set api_token (or CROSSFEED_API_TOKEN), or pass --insecure to run "
        "it so anyway"
    )
