"""A standby hands mutations to the leader itself: the client talks to any coordinator.

Kafka Connect workers do the same: a request that only the leader may serve is sent on
by the worker that received it, and the client gets the leader's answer (status, body)
as if it had asked the leader. No redirect for the client to follow, so a client that
only knows one coordinator — or a load balancer in front of all of them — works.

Mutations are ``POST``, ``PUT``, ``DELETE`` and ``PATCH`` under ``/v1/``, except the
translate routes, which any coordinator answers. A forwarded request carries
``X-Crossfeed-Forwarded-By``; one that arrives at a coordinator that does not lead (the
leadership moved meanwhile) is refused with 503 ``leader_moved`` rather than forwarded
again, and clients retry 503s. When no leader is known, or it cannot be reached, the
answer is 503 (``no_leader``, ``unavailable``).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from typing import Any, Final

import httpx
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, Response

from crossfeed.services.coordinator import errors
from crossfeed.services.coordinator.leadership import LeaderInfo

log = logging.getLogger(__name__)

FORWARDED_BY: Final = "x-crossfeed-forwarded-by"
MUTATING: Final = frozenset({"POST", "PUT", "DELETE", "PATCH"})
FORWARD_TIMEOUT_S: Final = 120.0
"""A failover or failback on the leader can take a while (it waits for clusters)."""
PASSED_ON: Final = ("content-type", "x-crossfeed-outcome")
"""Response headers handed back from the leader (besides status and body)."""

LeaderAddress = Callable[[], tuple[LeaderInfo, str | None]]
"""Who leads as this coordinator knows it, and that leader's REST host:port."""


def is_mutation(method: str, path: str) -> bool:
    return method in MUTATING and path.startswith("/v1/") and not path.endswith("/translate")


def refusal(code: str, message: str) -> Response:
    return JSONResponse(status_code=503, content=errors.body(code, message))


class ForwardToLeader:
    """ASGI middleware: on a standby, mutations are answered by the leader."""

    def __init__(
        self,
        app: Any,
        leader: LeaderAddress,
        scheme: str = "http",
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """``scheme``/``verify``: how the leader's REST API is reached (https with the
        coordinators' CA when they serve TLS)."""
        self.app = app
        self.leader = leader
        self.scheme = scheme
        self.verify = verify

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not is_mutation(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        info, address = await run_in_threadpool(self.leader)  # may read the state topic
        if info.leading:
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        response = await self._answer(scope, receive, headers, info, address)
        await response(scope, receive, send)

    async def _answer(
        self,
        scope: Any,
        receive: Any,
        headers: dict[str, str],
        info: LeaderInfo,
        address: str | None,
    ) -> Response:
        if FORWARDED_BY in headers:
            return refusal(
                "leader_moved",
                f"{headers[FORWARDED_BY]} forwarded this request here, but {info.me} does "
                "not lead (leadership is moving); retry",
            )
        if info.holder is None or address is None or info.holder == info.me:
            return refusal(
                "no_leader",
                "no coordinator leader is known right now (an election may be under way); "
                "retry in a few seconds, and check 'crossfeed coordinator run' is running",
            )
        try:
            body = await _read_body(receive)
        except HTTPException as err:  # the body limit (body_limit.py) refused it
            content = errors.body(errors.code_for(err.status_code), str(err.detail))
            return JSONResponse(status_code=err.status_code, content=content)
        url = f"{self.scheme}://{address}{scope['path']}"
        if scope.get("query_string"):
            url += "?" + scope["query_string"].decode("latin-1")
        sent = {k: v for k, v in headers.items() if k in ("authorization", "content-type")}
        sent[FORWARDED_BY] = info.me
        try:
            async with httpx.AsyncClient(timeout=FORWARD_TIMEOUT_S, verify=self.verify) as client:
                answer = await client.request(scope["method"], url, content=body, headers=sent)
        except httpx.HTTPError as err:
            return refusal(
                "unavailable",
                f"the leader {info.holder} at {address} did not answer "
                f"({err or type(err).__name__}); retry",
            )
        log.debug("forwarded %s %s to the leader %s", scope["method"], scope["path"], address)
        passed = {k: v for k, v in answer.headers.items() if k.lower() in PASSED_ON}
        return Response(answer.content, status_code=answer.status_code, headers=passed)


async def _read_body(receive: Any) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)
