"""A small client of Kafka Connect's REST API (the calls crossfeed makes: list plugins,
create, read and delete a connector)."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from typing import Any


class ConnectError(RuntimeError):
    """The Connect REST API refused a request or did not answer; the message says which."""


def request(url: str, method: str, path: str, body: Any = None, timeout_s: float = 10.0) -> Any:
    """One Connect REST call; the decoded JSON answer (None for an empty one)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as answer:
            raw = answer.read()
    except urllib.error.HTTPError as err:
        detail = err.read().decode("utf-8", "replace")
        with contextlib.suppress(ValueError, AttributeError):
            detail = json.loads(detail).get("message", detail)
        raise ConnectError(f"{method} {url}{path}: HTTP {err.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as err:
        raise ConnectError(f"{method} {url}{path}: no answer ({err})") from None
    return json.loads(raw) if raw else None
