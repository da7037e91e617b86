"""The coordinator's REST API (FastAPI; OpenAPI at ``/docs`` and ``/openapi.json``).

``/v1/changefeeds`` (list, create, get, remove) with ``/pause`` and ``/resume``,
``/v1/status``, ``/v1/captures``, ``/v1/ha/status``, plus ``/metrics`` and ``/healthz``.

* GETs are answered by any coordinator from its own copy of ``_crossfeed.state``.
* Mutations need ``Authorization: Bearer <token>`` when a token is configured (401
  otherwise). Only the leader performs them: a standby answers 307 to the same path on
  the leader's address (from the leader's heartbeat), or 503 when no leader is known.
* A body over 256 KiB is refused with 413 before it is read (body_limit.py).
* Refusals are 4xx with ``{"detail": "<what is wrong and how to fix it>"}``.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from crossfeed import __version__
from crossfeed.feeds import FeedSpec
from services.coordinator.body_limit import BodyLimit
from services.coordinator.fold import StateView
from services.coordinator.leadership import LeaderInfo
from services.coordinator.lifecycle import Action, LifecycleError, describe_errors, not_found
from services.coordinator.members import MembersView
from services.coordinator.views import (
    Capture,
    FeedInfo,
    FeedStatusInfo,
    HaStatus,
    captures,
    feed_info,
    feed_status,
    ha_status,
)


class Control(Protocol):
    """What the API needs from the coordinator (a fake in unit tests)."""

    def views(self) -> tuple[StateView, MembersView, int]:
        """State snapshot, live members and the time (ms) they were taken at."""
        ...

    def leader(self) -> LeaderInfo: ...

    def commit_modes(self) -> dict[str, str]:
        """Per mirror feed this coordinator translates (the leader's), how group commits
        reach its translator: ``stream`` or ``poll (why)``; empty on a standby."""
        ...

    def create(self, spec: FeedSpec) -> None:
        """Store a new feed (leader only); raises LifecycleError or NotLeaderNow."""
        ...

    def act(self, name: str, action: Action) -> None:
        """Pause, resume or remove a feed (leader only); raises like ``create``."""
        ...


class NotLeaderNow(Exception):
    """Leadership moved while the request was being handled."""


class FeedDetail(BaseModel):
    feed: FeedInfo
    status: FeedStatusInfo


def token_check(token: str | None) -> Callable[..., None]:
    """A FastAPI dependency for mutating routes: the bearer token, when one is set."""

    def authorized(authorization: Annotated[str | None, Header()] = None) -> None:
        if not token:
            return
        if authorization is None:
            raise LifecycleError(
                401,
                "this coordinator requires an API token: send 'Authorization: Bearer <token>' "
                "(the CLI sends CROSSFEED_API_TOKEN or api_token from the configuration file)",
            )
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
            raise LifecycleError(401, "API token rejected: check CROSSFEED_API_TOKEN")

    return authorized


def leader_only(control: Control) -> Callable[[Request], Response | None]:
    """For mutating routes: None on the leader; else a 307 to the same path on the
    leader's address (from its heartbeat), or 503 when no leader is known."""

    def route_to_leader(request: Request) -> Response | None:
        info = control.leader()
        if info.leading:
            return None
        _, members, _ = control.views()
        address = members.address_of(info.holder) if info.holder else None
        if info.holder is None or address is None or info.holder == info.me:
            return JSONResponse(
                status_code=503,
                content={
                    "detail": "no coordinator leader is known right now (an election may be "
                    "under way); retry in a few seconds, and check 'crossfeed coordinator run' "
                    "is running"
                },
            )
        url = f"http://{address}{request.url.path}"
        if request.url.query:
            url += f"?{request.url.query}"
        return RedirectResponse(url, status_code=307)

    return route_to_leader


def make_app(control: Control, token: str | None) -> FastAPI:
    app = FastAPI(
        title="crossfeed coordinator",
        version=__version__,
        description="Changefeeds, their state and tasks, live instances and leadership.",
    )

    app.add_middleware(BodyLimit)
    authorized = token_check(token)
    route_to_leader = leader_only(control)

    @app.exception_handler(LifecycleError)
    async def _refused(_request: Request, err: LifecycleError) -> JSONResponse:
        return JSONResponse(status_code=err.status_code, content={"detail": err.message})

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, err: RequestValidationError) -> JSONResponse:
        return JSONResponse(status_code=400, content={"detail": describe_errors(err.errors())})

    @app.exception_handler(NotLeaderNow)
    async def _moved(_request: Request, _err: NotLeaderNow) -> JSONResponse:
        return JSONResponse(
            status_code=503,
            content={"detail": "leadership moved while handling the request; retry"},
        )

    def found(view: StateView, name: str) -> None:
        if name not in view.feeds:
            raise not_found(name)

    # -- changefeeds ---------------------------------------------------------------------

    @app.get("/v1/changefeeds", response_model=list[FeedInfo], tags=["changefeeds"])
    def list_feeds(include_removed: bool = Query(False, alias="all")) -> list[FeedInfo]:
        """Every changefeed (``?all=true`` includes removed ones)."""
        view, _, _ = control.views()
        feeds = [feed_info(view, name) for name in sorted(view.feeds)]
        return [f for f in feeds if include_removed or f.state != "removed"]

    @app.post(
        "/v1/changefeeds",
        status_code=201,
        response_model=FeedInfo,
        dependencies=[Depends(authorized)],
        tags=["changefeeds"],
        responses={307: {"description": "not the leader: same request to the leader"}},
    )
    def create_feed(spec: FeedSpec, request: Request) -> Any:
        """Create a changefeed (the fields of ``crossfeed changefeed create``)."""
        moved = route_to_leader(request)
        if moved is not None:
            return moved
        control.create(spec)
        view, _, _ = control.views()
        return feed_info(view, spec.name)

    @app.get("/v1/changefeeds/{name}", response_model=FeedDetail, tags=["changefeeds"])
    def get_feed(name: str) -> FeedDetail:
        view, members, now = control.views()
        found(view, name)
        status = feed_status(view, members, name, now, control.commit_modes().get(name))
        return FeedDetail(feed=feed_info(view, name), status=status)

    def act(name: str, action: Action, request: Request) -> Any:
        moved = route_to_leader(request)
        if moved is not None:
            return moved
        control.act(name, action)
        view, _, _ = control.views()
        return feed_info(view, name)

    @app.post(
        "/v1/changefeeds/{name}/pause",
        response_model=FeedInfo,
        dependencies=[Depends(authorized)],
        tags=["changefeeds"],
    )
    def pause_feed(name: str, request: Request) -> Any:
        """Stop the feed's tasks; its position is kept."""
        return act(name, "pause", request)

    @app.post(
        "/v1/changefeeds/{name}/resume",
        response_model=FeedInfo,
        dependencies=[Depends(authorized)],
        tags=["changefeeds"],
    )
    def resume_feed(name: str, request: Request) -> Any:
        """Run a paused, failed or erroring feed again."""
        return act(name, "resume", request)

    @app.delete(
        "/v1/changefeeds/{name}",
        response_model=FeedInfo,
        dependencies=[Depends(authorized)],
        tags=["changefeeds"],
    )
    def remove_feed(name: str, request: Request) -> Any:
        """Stop the feed for good (its name may be used again)."""
        return act(name, "remove", request)

    # -- runtime -------------------------------------------------------------------------

    @app.get("/v1/status", response_model=list[FeedStatusInfo], tags=["status"])
    def status() -> list[FeedStatusInfo]:
        """Per feed: state, tasks and owners, timestamps and lag."""
        view, members, now = control.views()
        modes = control.commit_modes()
        return [
            feed_status(view, members, name, now, modes.get(name))
            for name in sorted(view.feeds)
            if view.state(name) != "removed"
        ]

    @app.get("/v1/captures", response_model=list[Capture], tags=["status"])
    def live_instances() -> list[Capture]:
        """Live instances (pullers, sinks, sorters, coordinators) and their tasks."""
        _, members, _ = control.views()
        return captures(members)

    @app.get("/v1/ha/status", response_model=HaStatus, tags=["status"])
    def ha() -> HaStatus:
        """This coordinator's role, the leader, the lease and the peers."""
        _, members, _ = control.views()
        return ha_status(control.leader(), members)

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz", include_in_schema=False)
    def healthz() -> PlainTextResponse:
        return PlainTextResponse("ok\n")

    return app
