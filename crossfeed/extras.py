"""Optional dependencies: which extra of the crossfeed package brings what.

A plain ``pip install crossfeed`` is the client library, the ``crossfeed`` command, the
puller and the Kafka sink. The sorter (PySpark), the PostgreSQL sink and the
coordinator's REST server need more, installed as extras (``pip install
'crossfeed[sorter]'``). Their imports are deferred to where they are used, so a missing
extra shows up only when that part starts, and :func:`require` makes it say which
extra to install instead of a bare ``ModuleNotFoundError`` deep in a stack trace.
"""

from __future__ import annotations

import importlib.util

from crossfeed.config import ConfigError

# Keep in step with [project.optional-dependencies] in pyproject.toml (a unit test checks).
EXTRAS: dict[str, tuple[str, ...]] = {
    "sorter": ("pyspark", "pandas", "pyarrow", "numpy"),
    "postgres": ("psycopg", "orjson"),
    "coordinator": ("fastapi", "uvicorn"),
}


class MissingExtra(ConfigError):
    """A part of crossfeed was started without the extra it needs (exit code 1)."""


def missing_message(extra: str, what: str, missing: list[str]) -> str:
    """The one line a user sees: what cannot run, what is missing, what to install."""
    return (
        f"{what} needs {', '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} "
        f"not installed: pip install 'crossfeed[{extra}]'"
    )


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` unless every module of ``extra`` can be imported."""
    if extra not in EXTRAS:
        raise ValueError(f"unknown extra {extra!r}; known: {', '.join(sorted(EXTRAS))}")
    missing = [m for m in EXTRAS[extra] if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(missing_message(extra, what, missing))
