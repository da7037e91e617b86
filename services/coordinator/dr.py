"""``/v1/switchover`` and ``/v1/failback/database``: the change of direction of a database
feed, planned or after a failover (crossfeed/dr/, docs/disaster-recovery.md).

* ``POST /v1/switchover`` (body ``SwitchoverRequest``): freezes the source database,
  drains the feed, compares the tables by digest, removes the feed and creates its reverse
  (a Debezium connector on the target's side, no snapshot). 200 with the report; 400
  ``switchover_refused`` with one line per reason, nothing changed (or undone).
* ``POST /v1/failback/database`` (body ``FailbackRequest``): after a failover, lists the
  old primary's divergent tail into a table there, re-seeds it from the new primary,
  runs the reverse feed until caught up and (``switch_back``) switches over back.

Mutations need the token and run on the leader. The coordinator connects to both
databases, both Connect clusters and the source side's Kafka itself (``crossfeed[postgres]``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from crossfeed.cdc.connect_api import ConnectError
from crossfeed.config.settings import Settings
from crossfeed.core.secrets import mask_text
from crossfeed.dr import failback, switchover
from crossfeed.dr.failback import FailbackError, FailbackReport, FailbackRequest
from crossfeed.dr.switchover import SwitchoverError, SwitchoverReport, SwitchoverRequest
from crossfeed.feeds import FeedSpec
from crossfeed.services.coordinator import errors
from crossfeed.services.coordinator.lifecycle import LifecycleError
from crossfeed.services.coordinator.pairs import CoordinatorFeeds

LeaderCheck = Callable[[Request], Response | None]


class DrFeeds(CoordinatorFeeds):
    """The coordinator's feeds as a switchover uses them (crossfeed.dr.switchover.Feeds)."""

    def spec(self, name: str) -> FeedSpec | None:
        view, _members, _now = self.control.views()
        if name not in view.feeds or view.state(name) == "removed":
            return None
        spec: FeedSpec = view.feeds[name].spec
        return spec

    def retire(self, name: str) -> None:
        self.control.act(name, "remove")


def _unavailable(err: Exception) -> Exception:
    """A database that does not answer (or refuses a statement) is the operator's to fix:
    503 with its message (secrets masked); anything else is a bug, raised as it is."""
    if type(err).__module__.split(".")[0] != "psycopg":
        return err
    return LifecycleError(503, mask_text(str(err).strip()), "unavailable")


def dr_routes(
    control: Any, settings: Settings, authorized: Callable[..., None], leader: LeaderCheck
) -> APIRouter:
    router = APIRouter(tags=["disaster recovery"])
    feeds = DrFeeds(control)
    refusals = errors.responses(400, 401, 409, 413)

    def staging(spec: FeedSpec) -> str:
        return settings.staging_alias(None)

    def cluster_conf(alias: str) -> dict[str, Any]:
        return settings.cluster(alias).client_config()

    @router.post(
        "/v1/switchover",
        response_model=SwitchoverReport,
        dependencies=[Depends(authorized)],
        responses=refusals,
    )
    async def switch_over(request: SwitchoverRequest, http: Request) -> Any:
        """Reverse a database feed with nothing lost (the options of crossfeed switchover)."""
        moved = leader(http)
        if moved is not None:
            return moved
        try:
            return await run_in_threadpool(switchover.run, request, feeds, staging)
        except (SwitchoverError, ConnectError, TimeoutError) as err:
            raise LifecycleError(400, str(err), "switchover_refused") from None
        except Exception as err:
            raise _unavailable(err) from None

    @router.post(
        "/v1/failback/database",
        response_model=FailbackReport,
        dependencies=[Depends(authorized)],
        responses=refusals,
    )
    async def fail_back(request: FailbackRequest, http: Request) -> Any:
        """After a failover: list the old primary's tail, re-seed it, reverse, switch back."""
        moved = leader(http)
        if moved is not None:
            return moved
        try:
            return await run_in_threadpool(failback.run, request, feeds, staging, cluster_conf)
        except (FailbackError, SwitchoverError, ConnectError, TimeoutError) as err:
            raise LifecycleError(400, str(err), "failback_refused") from None
        except Exception as err:
            raise _unavailable(err) from None

    return router
