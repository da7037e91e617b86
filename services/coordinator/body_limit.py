"""Refuse oversized request bodies with 413 before any route reads them.

A feed spec is a few hundred bytes; a body of megabytes is a mistake or an attack, and
taken in it would reach ``_crossfeed.state`` only to fail there as "message too large"
with a 503, which clients are told to retry. Bodies that announce their length are
refused before they are read; chunked ones as soon as they pass the limit.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from crossfeed.services.coordinator import errors

MAX_BODY_BYTES: Final = 256 << 10


def _detail(limit: int) -> str:
    return (
        f"request body larger than {limit} bytes: a changefeed spec is a few hundred bytes; "
        "check what is being sent"
    )


class BodyLimit:
    """ASGI middleware: 413 for a request body over ``limit`` bytes."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            response = JSONResponse(
                status_code=413, content=errors.body("body_too_large", _detail(self.limit))
            )
            await response(scope, receive, send)
            return
        received = 0

        async def limited() -> Any:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:  # FastAPI's exception middleware answers it
                    raise HTTPException(413, _detail(self.limit))
            return message

        await self.app(scope, limited, send)
