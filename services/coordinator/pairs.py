"""``/v1/pairs``: active-active pairs of PostgreSQL databases (crossfeed/pair/ops.py).

* ``POST /v1/pairs`` makes a pair (body: ``PairRequest``): checks both databases, adds
  the pair's SQL, registers both Debezium connectors and creates (or updates) its two
  feeds ``NAME-a-to-b`` and ``NAME-b-to-a`` through this coordinator like any feed; the
  same request again changes nothing. 201 with what was done; 400 ``pair_refused`` with
  one line per finding (the first line says how many).
* ``GET /v1/pairs/{name}?connect_a=URL&connect_b=URL``: both directions (state,
  consistency_ts, lag), both connectors (when the Connect URLs are given) and the
  databases' findings now.
* ``DELETE /v1/pairs/{name}?connect_a=URL&connect_b=URL[&drop_hidden=true]``: both feeds
  and both connectors removed; what stays behind (slots, publications, origins, hidden
  columns unless dropped), each with the SQL that removes it.

Mutations need the token and run on the leader, like the changefeed routes. The pair's
database URIs come from the request, then from its feeds (their sink URIs); the
coordinator connects to both databases and to both Connect clusters itself, so it needs
``crossfeed[postgres]`` installed for these routes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from crossfeed.config.errors import ConfigError
from crossfeed.feeds import parse_feed
from crossfeed.pair import ops
from crossfeed.pair.ops import PairError, PairNotFound, PairRequest
from crossfeed.services.coordinator import errors
from crossfeed.services.coordinator.lifecycle import LifecycleError
from crossfeed.services.coordinator.views import feed_status

LeaderCheck = Callable[[Request], Response | None]


class CoordinatorFeeds:
    """A pair's view of the coordinator's feeds (ops.FeedControl)."""

    def __init__(self, control: Any) -> None:
        self.control = control

    def put_feed(self, body: dict[str, Any]) -> str:
        try:
            spec = parse_feed(body, f"feed {body.get('name')!r} of the pair")
        except ConfigError as err:
            raise LifecycleError(400, str(err)) from None
        return str(self.control.put(spec))

    def feed(self, name: str) -> dict[str, Any] | None:
        view, members, now = self.control.views()
        if name not in view.feeds or view.state(name) == "removed":
            return None
        spec = view.feeds[name].spec
        status = feed_status(view, members, name, now)
        return {
            # Unmasked: the pair reads its databases from the sink URIs (its answers are
            # masked instead).
            "feed": {
                "name": name,
                "source": spec.source,
                "sink_uri": spec.sink_uri,
                "topics": list(spec.topics),
                "config": spec.config.model_dump(by_alias=True, exclude_none=True),
                "last_error": status.last_error,
            },
            "status": status.model_dump(mode="json"),
        }

    def remove_feed(self, name: str) -> None:
        self.control.act(name, "remove")


def _refused(err: PairError) -> LifecycleError:
    return LifecycleError(400, str(err), "pair_refused")


def pair_routes(control: Any, authorized: Callable[..., None], leader: LeaderCheck) -> APIRouter:
    router = APIRouter(tags=["pairs"])
    feeds = CoordinatorFeeds(control)
    refusals = errors.responses(400, 401, 404, 409, 413)

    @router.post(
        "/v1/pairs", status_code=201, dependencies=[Depends(authorized)], responses=refusals
    )
    async def create_pair(request: PairRequest, http: Request) -> Any:
        """Make an active-active pair (the options of ``crossfeed pair create``)."""
        moved = leader(http)
        if moved is not None:
            return moved
        try:
            return await run_in_threadpool(ops.create, request, feeds, lambda _line: None)
        except PairError as err:
            raise _refused(err) from None

    @router.get("/v1/pairs/{name}", responses=errors.responses(400, 404))
    async def pair_status(
        name: str,
        connect_a: str = Query("", description="Kafka Connect REST URL of side A"),
        connect_b: str = Query("", description="Kafka Connect REST URL of side B"),
    ) -> Any:
        """Both directions, both connectors, the findings of both databases."""
        try:
            return await run_in_threadpool(ops.status, name, feeds, connect_a, connect_b)
        except PairNotFound as err:
            raise LifecycleError(404, str(err), "pair_not_found") from None
        except PairError as err:
            raise _refused(err) from None

    @router.delete("/v1/pairs/{name}", dependencies=[Depends(authorized)], responses=refusals)
    async def remove_pair(
        name: str,
        http: Request,
        connect_a: str = Query("", description="Kafka Connect REST URL of side A"),
        connect_b: str = Query("", description="Kafka Connect REST URL of side B"),
        drop_hidden: bool = Query(False, description="drop the hidden columns and triggers"),
    ) -> Any:
        """Remove both feeds and both connectors; say what stays behind."""
        moved = leader(http)
        if moved is not None:
            return moved
        try:
            answer = await run_in_threadpool(
                ops.remove, name, feeds, connect_a, connect_b, drop_hidden
            )
        except PairNotFound as err:
            raise LifecycleError(404, str(err), "pair_not_found") from None
        except PairError as err:
            raise _refused(err) from None
        return JSONResponse(answer)

    return router
