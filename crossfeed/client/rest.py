"""A client of the coordinator's REST API (what ``crossfeed changefeed``/``status`` use).

Requests answered 503 (no leader known yet, or leadership moving) are retried for a few
seconds, which covers a failover. Redirects from a standby to the leader (307) are
followed here rather than by httpx, which drops the ``Authorization`` header when a
redirect leaves the original host:port — the leader must see the token too. Every
failure is an :class:`ApiError` whose message is the server's own, or says which URL
could not be reached and how to start a coordinator.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote, urljoin

import httpx

MAX_REDIRECTS = 3
RETRY_PAUSE_S = 0.5


class ApiError(Exception):
    """A refused or failed request; ``status_code`` is None when nothing answered."""

    def __init__(self, message: str, status_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code


class CoordinatorClient:
    """``/v1`` of one coordinator (any of them: standbys redirect mutations)."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        timeout_s: float = 30.0,
        retry_s: float = 5.0,
    ) -> None:
        self.server = server.rstrip("/")
        self.retry_s = retry_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(headers=headers, timeout=timeout_s, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request (following redirects to the leader); returns the JSON body.

        A 503 (no leader known yet, or leadership moving) is retried for ``retry_s``."""
        deadline = time.monotonic() + self.retry_s
        while True:
            try:
                return self._send(method, path, body)
            except ApiError as err:
                if err.status_code != 503 or time.monotonic() >= deadline:
                    raise
            time.sleep(RETRY_PAUSE_S)

    def _send(self, method: str, path: str, body: Any) -> Any:
        url = f"{self.server}{path}"
        for _ in range(MAX_REDIRECTS + 1):
            try:
                response = self._http.request(method, url, json=body)
            except httpx.TransportError as err:
                raise ApiError(
                    f"cannot reach the coordinator at {url} ({err or type(err).__name__}); "
                    "start one with 'crossfeed coordinator run', or point --server "
                    "(or CROSSFEED_SERVER) at a running one"
                ) from None
            if response.status_code in (307, 308) and "location" in response.headers:
                url = urljoin(url, response.headers["location"])
                continue
            if response.status_code >= 400:
                raise ApiError(_message(response), response.status_code)
            return response.json()
        raise ApiError(f"too many redirects from {self.server} (last: {url})")

    # -- /v1 ----------------------------------------------------------------------------

    def create_feed(self, feed: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", "/v1/changefeeds", feed)
        return result

    def list_feeds(self, include_removed: bool = False) -> list[dict[str, Any]]:
        query = "?all=true" if include_removed else ""
        result: list[dict[str, Any]] = self.request("GET", f"/v1/changefeeds{query}")
        return result

    def get_feed(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", _feed_path(name))
        return result

    def pause_feed(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", _feed_path(name, "/pause"))
        return result

    def resume_feed(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("POST", _feed_path(name, "/resume"))
        return result

    def remove_feed(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.request("DELETE", _feed_path(name))
        return result

    def status(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/v1/status")
        return result

    def captures(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.request("GET", "/v1/captures")
        return result

    def ha_status(self) -> dict[str, Any]:
        result: dict[str, Any] = self.request("GET", "/v1/ha/status")
        return result


def _feed_path(name: str, suffix: str = "") -> str:
    return f"/v1/changefeeds/{quote(name, safe='')}{suffix}"


def _message(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    if isinstance(detail, str) and detail:
        return detail
    text = response.text.strip() or response.reason_phrase
    request = response.request
    return f"{request.method} {request.url} answered {response.status_code}: {text}"
