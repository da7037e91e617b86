"""One error body for every refusal of the REST API (``errors.py``), whoever raises it:
the routes (LifecycleError), request validation, leadership moving mid-request, and
FastAPI/Starlette themselves (unknown path, wrong method, the body limit, the failover
routes' HTTPException)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from crossfeed.services.coordinator import errors
from crossfeed.services.coordinator.lifecycle import LifecycleError, NotLeaderNow, describe_errors


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(LifecycleError)
    async def _refused(_request: Request, err: LifecycleError) -> JSONResponse:
        return JSONResponse(status_code=err.status_code, content=errors.body(err.code, err.message))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        message = describe_errors(err.errors())
        return JSONResponse(status_code=400, content=errors.body("invalid_request", message))

    @app.exception_handler(NotLeaderNow)
    async def _moved(_request: Request, _err: NotLeaderNow) -> JSONResponse:
        message = "leadership moved while handling the request; retry"
        return JSONResponse(status_code=503, content=errors.body("leader_moved", message))

    @app.exception_handler(HTTPException)
    async def _http(_request: Request, err: HTTPException) -> JSONResponse:
        code = errors.code_for(err.status_code)
        return JSONResponse(status_code=err.status_code, content=errors.body(code, str(err.detail)))
