"""A feed's life: what a create must satisfy, and what pause/resume/remove do to it.

States (FeedStatus.state)::

    create ──▶ normal ◀──────▶ error ──(stuck)──▶ failed
                 │  ▲   (instances report errors / stop reporting them)
           pause │  │ resume            pause/resume also from error and failed
                 ▼  │
                paused          remove: any state ──▶ removed (the name may be reused)

``normal`` and ``error`` run tasks; ``paused``, ``failed``, ``removed`` and
``failed_over`` (action ``fail_over``, by ``crossfeed failover``) run none. The
``error`` ⇄ ``normal`` and ``error`` → ``failed`` moves come from heartbeats
(``status.py``); the rest from operator commands, checked here. Every refusal is a
:class:`LifecycleError` whose message says what is wrong and how to fix it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from crossfeed.config import ConfigError, Settings
from crossfeed.feeds import FeedOptions, FeedSpec, describe_target, target_of
from crossfeed.services.coordinator import errors
from crossfeed.services.coordinator.fold import StateView

Action = Literal["pause", "resume", "remove", "fail_over", "fail_back"]

TRANSITIONS: dict[str, dict[str, str]] = {
    "pause": {"normal": "paused", "error": "paused", "failed": "paused", "paused": "paused"},
    "resume": {"paused": "normal", "error": "normal", "failed": "normal", "normal": "normal"},
    "remove": {
        state: "removed" for state in ("normal", "error", "failed", "paused", "failed_over")
    },
    "fail_over": {
        state: "failed_over" for state in ("normal", "error", "failed", "paused", "failed_over")
    },
    # A completed failback: the forward feed replicates from the old primary again.
    "fail_back": {"failed_over": "normal", "normal": "normal"},
}


class LifecycleError(Exception):
    """A refused request: an HTTP status code, a stable error code (``errors.CODES``;
    by default the one of the status) and a message for the operator."""

    def __init__(self, status_code: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
        self.code = code or errors.code_for(status_code)


class NotLeaderNow(Exception):
    """Leadership moved while the request was being handled (503 leader_moved)."""


def not_found(name: str) -> LifecycleError:
    return LifecycleError(
        404,
        f"no changefeed named {name!r}; list them with 'crossfeed changefeed list'",
        "feed_not_found",
    )


def transition(name: str, state: str | None, action: Action) -> str:
    """The state after ``action`` on a feed in ``state`` (None: no such feed)."""
    if state is None or state == "removed":
        raise not_found(name)
    new = TRANSITIONS[action].get(state)
    if new is None:
        raise LifecycleError(
            409,
            f"changefeed {name!r} is {state}: it cannot be {action}d; "
            f"use 'crossfeed failback --feed {name}' to return to the old primary",
            "invalid_state",
        )
    return new


def restartable(name: str, state: str | None, spec: FeedSpec | None, task: int | None) -> list[int]:
    """The task numbers a restart of ``name`` (or of its ``task``) revokes."""
    if state is None or state == "removed" or spec is None:
        raise not_found(name)
    if state not in ("normal", "error"):
        raise LifecycleError(
            409,
            f"changefeed {name!r} is {state}: only a running feed's tasks restart; "
            f"'crossfeed changefeed resume {name}' starts them",
            "invalid_state",
        )
    count = spec.config.staging_partitions
    if task is None:
        return list(range(count))
    if not 0 <= task < count:
        raise LifecycleError(
            404,
            f"changefeed {name!r} has tasks 0 to {count - 1} (staging.partitions), not {task}",
            "task_not_found",
        )
    return [task]


Reachable = Callable[[str], str | None]
"""Cluster alias -> None if it answers, else why not."""


def sharing_target(spec: FeedSpec, view: StateView) -> str | None:
    """The first live feed (by name) writing what ``spec`` would (crossfeed.feeds.target_of),
    unless ``spec`` says it may share (``target.shared``)."""
    if spec.config.target_shared:
        return None
    key = target_of(spec)
    for name, stored in sorted(view.feeds.items()):
        if name != spec.name and view.state(name) != "removed" and target_of(stored.spec) == key:
            return name
    return None


def check_new_feed(spec: FeedSpec, view: StateView, settings: Settings, probe: Reachable) -> None:
    """Refuse a feed whose name is taken or whose clusters are unknown or unreachable."""
    state = view.state(spec.name)
    if spec.name in view.feeds and state != "removed":
        raise LifecycleError(
            409,
            f"changefeed {spec.name!r} already exists (state {state or 'normal'}); "
            f"pick another name, remove it first ('crossfeed changefeed remove {spec.name}') "
            f"or change it with 'crossfeed changefeed update {spec.name}'",
            "feed_exists",
        )
    other = sharing_target(spec, view)
    if other is not None:
        raise LifecycleError(
            409,
            f"changefeed {other!r} already writes {describe_target(spec)}: two feeds "
            f"writing the same tables or topics overwrite each other's rows and positions; "
            f"give {spec.name!r} another target, remove {other!r} first, or pass "
            f"--shared-target (option target.shared=true) if both are meant to write it",
            "target_taken",
        )
    aliases = [("source", spec.source)]
    if spec.sink.scheme == "kafka" and spec.sink.cluster:
        aliases.append(("sink", spec.sink.cluster))
    for role, alias in aliases:
        try:
            settings.cluster(alias)
        except ConfigError as err:
            raise LifecycleError(400, f"{role}: {err}", "unknown_cluster") from None
    for role, alias in aliases:
        problem = probe(alias)
        if problem is not None:
            raise LifecycleError(400, f"{role} cluster {alias}: {problem}", "cluster_unreachable")


def describe_errors(errors: Sequence[Any]) -> str:
    """One line for pydantic validation errors: field, problem and fix, joined by '; '."""
    parts = []
    for error in errors:
        loc = [str(p) for p in error.get("loc", ()) if p != "body"]
        kind = error.get("type", "")
        msg = str(error.get("msg", "")).removeprefix("Value error, ")
        if kind == "extra_forbidden" and loc[:1] == ["config"]:
            known = ", ".join(sorted(f.alias or n for n, f in FeedOptions.model_fields.items()))
            parts.append(f"unknown option {loc[-1]!r} (--config); known options: {known}")
        elif kind == "extra_forbidden":
            known = ", ".join(f.alias or n for n, f in FeedSpec.model_fields.items())
            parts.append(f"unknown field {'.'.join(loc)!r}; known fields: {known}")
        elif kind == "too_short" and loc == ["topics"]:
            parts.append("topics: give at least one topic name or regex (--topics)")
        elif kind == "missing":
            parts.append(f"{'.'.join(loc)} is missing")
        elif kind == "model_attributes_type":
            parts.append("the request body must be a JSON object with the fields of a feed")
        elif loc:
            parts.append(f"{'.'.join(loc)}: {msg}")
        else:
            parts.append(msg)
    return "; ".join(parts) or "invalid changefeed"
