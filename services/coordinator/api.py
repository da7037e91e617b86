"""The coordinator's REST API (FastAPI; OpenAPI at ``/docs`` and ``/openapi.json``).

``/v1/changefeeds`` (list, create, get, remove; ``PUT`` creates or updates) with
``/pause``, ``/resume``, ``/restart`` and ``/tasks/{task}/restart``, ``/v1/status``,
``/v1/captures``, ``/v1/ha/status``, ``/v1/pairs`` (active-active pairs: pairs.py), plus
``/metrics`` and ``/healthz``.

* GETs are answered by any coordinator from its own copy of ``_crossfeed.state``.
* Mutations need ``Authorization: Bearer <token>`` when a token is configured (401
  otherwise). Only the leader performs them: a standby sends them on to the leader (at
  the address in the leader's heartbeat) and answers with the leader's answer
  (forward.py), or 503 when no leader is known or reachable.
* A body over 256 KiB is refused with 413 before it is read (body_limit.py).
* Refusals are 4xx/5xx with ``{"error_code": "<stable code>", "message": "<what is wrong
  and how to fix it>"}`` (errors.py lists the codes; the OpenAPI documents them).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Annotated, Any, Protocol

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from crossfeed import __version__
from crossfeed.client.rest import trusting
from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator import errors
from crossfeed.services.coordinator.body_limit import BodyLimit
from crossfeed.services.coordinator.error_handlers import install_error_handlers
from crossfeed.services.coordinator.fold import StateView
from crossfeed.services.coordinator.forward import ForwardToLeader, LeaderAddress
from crossfeed.services.coordinator.leadership import LeaderInfo
from crossfeed.services.coordinator.lifecycle import Action, LifecycleError, not_found
from crossfeed.services.coordinator.members import MembersView
from crossfeed.services.coordinator.pairs import pair_routes
from crossfeed.services.coordinator.views import (
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

    def translation_notices(self) -> dict[str, list[str]]:
        """Per mirror feed this coordinator translates, its translator's notices (group
        positions in records deleted at the source); empty on a standby."""
        ...

    def create(self, spec: FeedSpec) -> None:
        """Store a new feed (leader only); raises LifecycleError or NotLeaderNow."""
        ...

    def put(self, spec: FeedSpec) -> str:
        """Create or update a feed (leader only): ``created``, ``updated`` or
        ``unchanged``; raises like ``create``."""
        ...

    def act(self, name: str, action: Action) -> None:
        """Pause, resume or remove a feed (leader only); raises like ``create``."""
        ...

    def restart(self, name: str, task: int | None) -> list[int]:
        """Restart a feed's tasks, or one (leader only): the task numbers restarted."""
        ...


class FeedDetail(BaseModel):
    feed: FeedInfo
    status: FeedStatusInfo


class Restarted(BaseModel):
    """The tasks revoked; each is assigned again once its owner let go of it, and
    starts from its committed position on the target."""

    feed: str
    tasks: list[str]


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
                "token_required",
            )
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip(), token):
            raise LifecycleError(
                401, "API token rejected: check CROSSFEED_API_TOKEN", "token_rejected"
            )

    return authorized


def leader_address(control: Control) -> LeaderAddress:
    """Who leads and at which REST address (from its heartbeat), for forward.py."""

    def find() -> tuple[LeaderInfo, str | None]:
        info = control.leader()
        if info.leading or info.holder is None:
            return info, None
        _, members, _ = control.views()
        return info, members.address_of(info.holder)

    return find


def leader_only(control: Control) -> Callable[[Request], Response | None]:
    """For mutating routes: None on the leader, else 503. A standby's mutations are
    forwarded before they reach a route (forward.py); this catches leadership lost
    between the two (the client retries a 503)."""

    def still_leading(_request: Request) -> Response | None:
        if control.leader().leading:
            return None
        message = "this coordinator stopped leading while handling the request; retry"
        return JSONResponse(status_code=503, content=errors.body("leader_moved", message))

    return still_leading


def make_app(
    control: Control, token: str | None, *, https: bool = False, ca_file: str | None = None
) -> FastAPI:
    """``https``: the coordinators serve TLS, so a standby forwards to the leader over
    https, trusting ``ca_file`` (else the system CAs)."""
    app = FastAPI(
        title="crossfeed coordinator",
        version=__version__,
        description="Changefeeds, their state and tasks, live instances and leadership. "
        "Every refusal is an ErrorBody; its error_code is one of: "
        + "; ".join(f"{code} ({why})" for code, why in errors.CODES.items()),
        responses=errors.responses(400, 503),
    )
    mutation_errors = errors.responses(401, 404, 409, 413)
    authorized = token_check(token)
    route_to_leader = leader_only(control)

    def mutation(
        method: str, path: str, model: type[BaseModel] = FeedInfo
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """The decorator of a route that changes a feed: token, errors, tag."""
        return app.api_route(
            path,
            methods=[method],
            response_model=model,
            dependencies=[Depends(authorized)],
            tags=["changefeeds"],
            responses=mutation_errors,
        )

    app.add_middleware(
        ForwardToLeader,
        leader=leader_address(control),
        scheme="https" if https else "http",
        verify=trusting(ca_file),
    )
    app.add_middleware(BodyLimit)  # added last: it runs first, also for forwarded bodies

    install_error_handlers(app)

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
        responses=mutation_errors,
    )
    def create_feed(spec: FeedSpec, request: Request) -> Any:
        """Create a changefeed (the fields of ``crossfeed changefeed create``)."""
        moved = route_to_leader(request)
        if moved is not None:
            return moved
        control.create(spec)
        view, _, _ = control.views()
        return feed_info(view, spec.name)

    @app.put(
        "/v1/changefeeds/{name}",
        response_model=FeedInfo,
        dependencies=[Depends(authorized)],
        tags=["changefeeds"],
        responses={
            201: {"model": FeedInfo, "description": "created"},
            **mutation_errors,
        },
    )
    def put_feed(name: str, spec: FeedSpec, request: Request) -> Any:
        """Create the feed, or update it: 201 when created, 200 when updated or unchanged
        (idempotent). An update may change the topics, excludes, rename format and
        options; source, sink-uri, mode, start and staging.partitions are fixed (409
        immutable_field). Running pullers pick an update up at once for new topics and
        new tasks; a running task after ``/restart``."""
        if spec.name != name:
            raise LifecycleError(
                400,
                f"the body names feed {spec.name!r} but the path {name!r}; they must match",
                "name_mismatch",
            )
        moved = route_to_leader(request)
        if moved is not None:
            return moved
        outcome = control.put(spec)
        view, _, _ = control.views()
        info = feed_info(view, spec.name)
        return JSONResponse(
            status_code=201 if outcome == "created" else 200,
            content=info.model_dump(mode="json"),
            headers={"X-Crossfeed-Outcome": outcome},
        )

    @app.get(
        "/v1/changefeeds/{name}",
        response_model=FeedDetail,
        tags=["changefeeds"],
        responses=errors.responses(404),
    )
    def get_feed(name: str) -> FeedDetail:
        view, members, now = control.views()
        found(view, name)
        status = feed_status(
            view,
            members,
            name,
            now,
            control.commit_modes().get(name),
            control.translation_notices().get(name, []),
        )
        return FeedDetail(feed=feed_info(view, name), status=status)

    def act(name: str, action: Action, request: Request) -> Any:
        moved = route_to_leader(request)
        if moved is not None:
            return moved
        control.act(name, action)
        view, _, _ = control.views()
        return feed_info(view, name)

    @mutation("POST", "/v1/changefeeds/{name}/pause")
    def pause_feed(name: str, request: Request) -> Any:
        """Stop the feed's tasks; its position is kept."""
        return act(name, "pause", request)

    @mutation("POST", "/v1/changefeeds/{name}/resume")
    def resume_feed(name: str, request: Request) -> Any:
        """Run a paused, failed or erroring feed again."""
        return act(name, "resume", request)

    @mutation("DELETE", "/v1/changefeeds/{name}")
    def remove_feed(name: str, request: Request) -> Any:
        """Stop the feed for good (its name may be used again)."""
        return act(name, "remove", request)

    def restart(name: str, task: int | None, request: Request) -> Any:
        moved = route_to_leader(request)
        if moved is not None:
            return moved
        tasks = control.restart(name, task)
        return Restarted(feed=name, tasks=[f"{name}/{s}" for s in tasks])

    @mutation("POST", "/v1/changefeeds/{name}/restart", Restarted)
    def restart_feed(name: str, request: Request) -> Any:
        """Restart every task of a running feed: each is revoked from its puller and
        assigned again once let go, resuming from its committed position (nothing lost
        or copied twice)."""
        return restart(name, None, request)

    @mutation("POST", "/v1/changefeeds/{name}/tasks/{task}/restart", Restarted)
    def restart_task(name: str, task: int, request: Request) -> Any:
        """Restart one task (0 to staging.partitions - 1) the same way."""
        return restart(name, task, request)

    app.include_router(pair_routes(control, authorized, route_to_leader))

    # -- runtime -------------------------------------------------------------------------

    @app.get("/v1/status", response_model=list[FeedStatusInfo], tags=["status"])
    def status() -> list[FeedStatusInfo]:
        """Per feed: state, tasks and owners, timestamps and lag."""
        view, members, now = control.views()
        modes = control.commit_modes()
        notices = control.translation_notices()
        return [
            feed_status(view, members, name, now, modes.get(name), notices.get(name, []))
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
