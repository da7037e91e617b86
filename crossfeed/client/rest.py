"""A client of the coordinator's REST API (what ``crossfeed changefeed``/``status`` use).

Any coordinator answers any call (a standby sends mutations on to the leader itself), so
the client needs no redirects. ``server`` may list several coordinators, comma-separated:
a request goes to the one that answered last, and to the next when that one cannot be
connected to, so the CLI works while any of them lives. Requests answered 503 (no leader
known yet, or leadership moving) are retried for a few seconds, which covers a failover.
Every failure is an :class:`ApiError` whose message is the server's own, or says which
URLs could not be reached and how to start a coordinator.
"""

from __future__ import annotations

import ssl
import time
from typing import Any
from urllib.parse import quote

import httpx

from crossfeed.core.secrets import mask_text

RETRY_PAUSE_S = 0.5


class ApiError(Exception):
    """A refused or failed request; ``status_code`` is None when nothing answered;
    ``error_code`` is the server's stable code (``unreachable`` when nothing answered)."""

    def __init__(
        self, message: str, status_code: int | None = None, error_code: str = "unreachable"
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.error_code = error_code


def servers_of(server: str) -> list[str]:
    """``http://a:8300, http://b:8300`` -> the URLs, in order, without trailing slashes."""
    urls = [part.strip().rstrip("/") for part in server.split(",") if part.strip()]
    if not urls:
        raise ApiError("no coordinator given: set --server (or CROSSFEED_SERVER) to its URL")
    return urls


def trusting(ca_file: str | None) -> ssl.SSLContext | bool:
    """What an https client verifies coordinators with: ``ca_file``, else the system CAs."""
    return ssl.create_default_context(cafile=ca_file) if ca_file else True


class CoordinatorClient:
    """``/v1`` of the coordinators in ``server`` (any of them serves any call)."""

    def __init__(
        self,
        server: str,
        token: str | None = None,
        timeout_s: float = 30.0,
        retry_s: float = 5.0,
        ca_file: str | None = None,
    ) -> None:
        """``ca_file``: the PEM CA to trust for https coordinators (else the system's)."""
        self.servers = servers_of(server)
        self.current = 0  # the server that answered last
        self.retry_s = retry_s
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            headers=headers,
            timeout=timeout_s,
            follow_redirects=False,
            verify=trusting(ca_file),
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request to a coordinator that answers; returns the JSON body.

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
        failures = []
        for i in range(len(self.servers)):
            index = (self.current + i) % len(self.servers)
            url = f"{self.servers[index]}{path}"
            try:
                response = self._http.request(method, url, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                # Nothing was sent: safe to ask the next one, even for a mutation.
                failures.append(mask_text(f"{url} ({err or type(err).__name__})"))
                continue
            except httpx.TransportError as err:  # sent, maybe done: do not send it twice
                raise ApiError(
                    mask_text(f"no answer from the coordinator at {url} ({err})")
                ) from None
            self.current = index
            if response.status_code >= 400:
                raise ApiError(*_refusal(response))
            return response.json()
        raise ApiError(
            f"cannot reach the coordinator at {', '.join(failures)}; start one with "
            "'crossfeed coordinator run', or point --server (or CROSSFEED_SERVER) at a "
            "running one (several: comma-separated)"
        )

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

    def put_feed(self, feed: dict[str, Any]) -> dict[str, Any]:
        """Create or update (idempotent); the feed as stored."""
        result: dict[str, Any] = self.request("PUT", _feed_path(feed["name"]), feed)
        return result

    def restart_feed(self, name: str, task: int | None = None) -> dict[str, Any]:
        suffix = "/restart" if task is None else f"/tasks/{task}/restart"
        result: dict[str, Any] = self.request("POST", _feed_path(name, suffix))
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


def _refusal(response: httpx.Response) -> tuple[str, int, str]:
    """(message, status, error_code) of a refusal: the server's ``{"error_code",
    "message"}``, or — from something that is not a coordinator — what it said."""
    try:
        content = response.json()
    except ValueError:
        content = None
    if isinstance(content, dict) and isinstance(content.get("message"), str):
        return content["message"], response.status_code, str(content.get("error_code"))
    text = response.text.strip() or response.reason_phrase
    request = response.request
    message = f"{request.method} {request.url} answered {response.status_code}: {text}"
    return message, response.status_code, "unexpected_answer"
