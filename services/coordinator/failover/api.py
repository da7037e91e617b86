"""REST routes of consumer failover: translate a group, fail a feed over, fail back.

* ``GET /v1/groups/{group}/translate?feed=F`` — a stored feed; ``POST`` the same path
  with ``{"feed": F, "feed_spec": {...}}`` for a feed run from a feed file. Answered by
  any coordinator (the leader's running translator when there is one, else a one-shot
  translation); nothing is written.
* ``POST /v1/failover`` and ``POST /v1/failback`` — leader only (a standby forwards them,
  like every mutation), bearer token when one is configured.

Refusals are HTTPExceptions; the app's handlers (``error_handlers.py``) answer them with
``{"error_code": ..., "message": ...}`` like every other refusal.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Annotated, Any

from confluent_kafka import KafkaException
from fastapi import APIRouter, Body, HTTPException, Query, Request

from crossfeed.config import ConfigError
from crossfeed.services.coordinator import metrics
from crossfeed.services.coordinator.failover.common import resolve_feed
from crossfeed.services.coordinator.failover.failback import run_failback
from crossfeed.services.coordinator.failover.failover import run_failover
from crossfeed.services.coordinator.failover.hooks import FailoverHooks
from crossfeed.services.coordinator.failover.models import (
    FailbackReport,
    FailbackRequest,
    FailoverReport,
    FailoverRequest,
    FeedRef,
    GroupOut,
)
from crossfeed.services.coordinator.failover.ordered import (
    OrderedFailoverReport,
    failover_record,
)
from crossfeed.services.coordinator.lifecycle import LifecycleError
from crossfeed.translation.kafka_io import Unreachable
from crossfeed.translation.translator import Translator, translate_once


@contextlib.contextmanager
def timed(operation: str) -> Iterator[None]:
    """Observe how long a failover or failback took, and how it ended: ``ok``,
    ``refused`` (4xx: nothing was done) or ``failed`` (a cluster did not answer)."""
    started = time.monotonic()
    outcome = "failed"
    try:
        yield
        outcome = "ok"
    except (HTTPException, LifecycleError) as err:
        outcome = "refused" if err.status_code < 500 else "failed"
        raise
    finally:
        metrics.FAILOVER_SECONDS.labels(operation, outcome).observe(time.monotonic() - started)


def make_router(hooks: FailoverHooks) -> APIRouter:
    router = APIRouter(tags=["consumer failover"])
    mutating: list[Any] = list(hooks.dependencies)

    def translate(group: str, feed: str, spec: dict[str, Any] | None) -> GroupOut:
        if not group:
            raise HTTPException(400, "give a consumer group id")
        resolved, _ = resolve_feed(hooks, feed, spec)
        running: Translator | None = hooks.translator(resolved.name)
        try:
            if running is not None:
                return GroupOut.of(running.translate_group(group))
            return GroupOut.of(translate_once(hooks.settings, resolved, group))
        except (TimeoutError, Unreachable, KafkaException) as err:
            raise HTTPException(503, f"cannot translate group {group!r} now: {err}") from None
        except ConfigError as err:
            raise HTTPException(400, str(err)) from None

    @router.get("/v1/groups/{group:path}/translate", response_model=GroupOut)
    def translate_stored(group: str, feed: Annotated[str, Query(description="feed name")]) -> Any:
        """Where a group resumes on the feed's target: per partition, exact or not."""
        return translate(group, feed, None)

    @router.post("/v1/groups/{group:path}/translate", response_model=GroupOut)
    def translate_given(group: str, body: Annotated[FeedRef, Body()]) -> Any:
        """The same for a feed run from a feed file (its spec in the body)."""
        return translate(group, body.feed, body.feed_spec)

    @router.post(
        "/v1/failover",
        response_model=FailoverReport | OrderedFailoverReport,
        dependencies=mutating,
    )
    def failover(body: Annotated[FailoverRequest, Body()], request: Request) -> Any:
        """Stop a feed, move its groups to the target at their exact records, report the RPO."""
        moved = hooks.leader_only(request) if hooks.leader_only else None
        if moved is not None:
            return moved
        with timed("failover"):
            try:
                return run_failover(hooks, body)
            except (Unreachable, KafkaException) as err:
                message = f"failover of {body.feed} did not complete: {err}"
                raise HTTPException(503, message) from None

    @router.get("/v1/failover/{feed}", response_model=OrderedFailoverReport | None)
    def failover_kept(feed: str) -> Any:
        """An ordered feed's newest failover report, as kept on its target (null: none)."""
        found = hooks.find_feed(feed)
        if found is None:
            raise LifecycleError(404, f"no changefeed named {feed!r}", "feed_not_found")
        return failover_record(found)

    @router.post("/v1/failback", response_model=FailbackReport, dependencies=mutating)
    def failback(body: Annotated[FailbackRequest, Body()], request: Request) -> Any:
        """Back to the old primary: extra data, reverse feed, groups translated back."""
        moved = hooks.leader_only(request) if hooks.leader_only else None
        if moved is not None:
            return moved
        with timed("failback"):
            try:
                return run_failback(hooks, body)
            except (Unreachable, KafkaException, TimeoutError) as err:
                message = f"failback of {body.feed} did not complete: {err}"
                raise HTTPException(503, message) from None

    return router
