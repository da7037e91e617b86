"""One error type for bad configuration, with a message an operator can act on."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class ConfigError(ValueError):
    """Invalid configuration: names the source, the field, the bad value and the fix."""


def from_validation_error(err: ValidationError, source: str) -> ConfigError:
    """Turn pydantic's report into one line per problem: field, value, what to do."""
    lines = []
    for problem in err.errors():
        # "properties" is a wrapper of ours around pass-through client settings; hide it.
        parts = [str(part) for part in problem["loc"] if part != "properties"]
        field = ".".join(parts) or "(top level)"
        value: Any = problem.get("input")
        msg = problem["msg"].removeprefix("Value error, ")
        lines.append(f"  {field} = {value!r}: {msg}")
    return ConfigError(f"invalid configuration in {source}:\n" + "\n".join(lines))
