"""The REST API's error body and its stable codes.

Every refusal, whatever produced it (a route, request validation, the body limit, an
unknown path), answers ``{"error_code": CODE, "message": TEXT}``: ``message`` is one line
for a person (what is wrong and how to fix it), ``error_code`` is for scripts and never
changes meaning. New codes may be added; existing ones are never renamed.
"""

from __future__ import annotations

from typing import Any, Final

from pydantic import BaseModel, Field

from crossfeed.core.secrets import mask_text

CODES: Final[dict[str, str]] = {
    "invalid_request": "the body or a parameter is malformed or fails validation",
    "unknown_cluster": "a cluster alias the coordinator's configuration does not know",
    "cluster_unreachable": "a cluster named by the feed does not answer",
    "name_mismatch": "the feed name in the body differs from the one in the path",
    "token_required": "a mutating call without 'Authorization: Bearer <token>'",
    "token_rejected": "the bearer token is wrong",
    "feed_not_found": "no (unremoved) changefeed of that name",
    "task_not_found": "the feed has no task of that number",
    "not_found": "no such path",
    "method_not_allowed": "the path exists, the method does not",
    "feed_exists": "POST of a feed whose name is taken",
    "target_taken": "another live feed writes the same target (target.shared=true allows it)",
    "invalid_state": "the feed's state does not allow the action",
    "immutable_field": "an update changes a field that is fixed once the feed exists",
    "body_too_large": "the request body is over the limit",
    "no_leader": "no coordinator leads right now (an election may be under way); retry",
    "leader_moved": "leadership moved while the request was handled; retry",
    "unavailable": "the control or a data cluster did not answer; retry",
    "pair_refused": "an active-active pair cannot be made as asked: one line per reason",
    "pair_not_found": "neither feed of that active-active pair exists",
    "switchover_refused": "a database feed cannot be reversed as asked (or was undone): one "
    "line per reason",
    "failback_refused": "a database feed's failback cannot go on: one line per reason",
    "internal_error": "a bug: the coordinator's log has the traceback",
}
"""Every ``error_code`` the API answers with, and what it means (also in the OpenAPI)."""

BY_STATUS: Final[dict[int, str]] = {
    400: "invalid_request",
    401: "token_required",
    404: "not_found",
    405: "method_not_allowed",
    409: "invalid_state",
    413: "body_too_large",
    422: "invalid_request",
    503: "unavailable",
}
"""The code of a refusal that does not name its own (FastAPI's, Starlette's)."""


class ErrorBody(BaseModel):
    """What every 4xx/5xx answer of the API carries."""

    error_code: str = Field(description="stable, machine-readable: " + ", ".join(CODES))
    message: str = Field(description="what is wrong and how to fix it, one line")


def body(code: str, message: str) -> dict[str, str]:
    if code not in CODES:  # a typo here would ship an undocumented code
        raise ValueError(f"undocumented error code {code!r}")
    # Every refusal, whoever words it: a URI quoted in it never shows its password.
    return {"error_code": code, "message": mask_text(message)}


def code_for(status_code: int) -> str:
    return BY_STATUS.get(status_code, "internal_error" if status_code >= 500 else "invalid_request")


def responses(*status_codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for routes: each status with the ErrorBody model."""
    described = {
        400: "invalid input (invalid_request, unknown_cluster, cluster_unreachable, "
        "name_mismatch, pair_refused, switchover_refused, failback_refused)",
        401: "token_required or token_rejected",
        404: "feed_not_found, task_not_found, pair_not_found",
        409: "feed_exists, target_taken, invalid_state or immutable_field",
        413: "body_too_large",
        503: "no_leader, leader_moved or unavailable: retry",
    }
    return {s: {"model": ErrorBody, "description": described.get(s, "")} for s in status_codes}
