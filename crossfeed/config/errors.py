"""One error type for bad configuration, with a message an operator can act on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError


class ConfigError(ValueError):
    """Invalid configuration: names the source, the field, the bad value and the fix."""


def read_yaml(path: Path, what: str) -> Any:
    """The parsed YAML of a file; ConfigError (one line, ``what`` names the file's role)
    when it cannot be read, is not UTF-8 text, or is not YAML."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{what} {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"{what} {path} is not UTF-8 text (byte 0x{err.object[err.start]:02x} at "
            f"position {err.start}): save it as UTF-8 YAML"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{what} {path} is not valid YAML: {err}") from None


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
