"""One error type for bad configuration, with a message an operator can act on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from crossfeed.core import secrets


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


def from_validation_error(
    err: ValidationError, source: str, model: type[BaseModel] | None = None
) -> ConfigError:
    """Turn pydantic's report into one line per problem: field, value, what to do.
    ``model`` (the settings class) lets an unknown key name the keys its section knows."""
    lines = []
    for problem in err.errors():
        # "properties" is a wrapper of ours around pass-through client settings; hide it.
        parts = [str(part) for part in problem["loc"] if part != "properties"]
        msg = secrets.mask_text(problem["msg"].removeprefix("Value error, "))
        if problem["type"] == "extra_forbidden":
            known = _known_keys(model, parts[:-1]) if model is not None else None
            msg = "unknown setting" + (f"; known here: {', '.join(known)}" if known else "")
        if not parts:  # a check across fields: its message names them (the input is all)
            lines.append(f"  {msg}")
            continue
        field = ".".join(parts)
        value = secrets.mask_value(parts[-1], problem.get("input"))
        if problem["type"] == "value_error" and isinstance(value, list | dict):
            # our own check: its message quotes the bad entry
            lines.append(f"  {field}: {msg}")
        else:
            lines.append(f"  {field} = {value!r}: {msg}")
    return ConfigError(f"invalid configuration in {source}:\n" + "\n".join(lines))


def _known_keys(model: type[BaseModel], path: list[str]) -> list[str] | None:
    """The field names of the section at ``path`` under ``model`` (None: not a section)."""
    for part in path:
        info = model.model_fields.get(part)
        inner = getattr(info, "annotation", None) if info is not None else None
        if not (isinstance(inner, type) and issubclass(inner, BaseModel)):
            return None
        model = inner
    return sorted(model.model_fields)
