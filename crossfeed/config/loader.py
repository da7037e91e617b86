"""Where settings come from (docs/design.md, Interfaces), first match wins:

``--config FILE``, else ``$CROSSFEED_CONFIG``, else ``./crossfeed.yaml``, else
``.crossfeed/local.yaml`` (written by ``crossfeed local up``). Environment variables
``CROSSFEED_*`` override the file; explicit arguments override both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from crossfeed import paths
from crossfeed.config.errors import ConfigError, from_validation_error, read_yaml
from crossfeed.config.settings import FILE_DATA, Settings

SECTIONS = set(Settings.model_fields)


def config_source(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The configuration file to read, following the search order; None if there is none."""
    if explicit:
        return _given(Path(explicit), "given by --config")
    env = os.environ.get("CROSSFEED_CONFIG")
    if env:
        return _given(Path(env), "from $CROSSFEED_CONFIG")
    for candidate in (Path("crossfeed.yaml").resolve(), paths.local_config()):
        if candidate.is_file():
            return candidate
    return None


def _given(path: Path, how: str) -> Path:
    """A configuration file named explicitly (``how``): it must be a file."""
    if path.is_dir():
        raise ConfigError(
            f"configuration file {path} ({how}) is a directory: name the YAML file in it, "
            f"e.g. {path / 'crossfeed.yaml'}"
        )
    if not path.is_file():
        raise ConfigError(f"configuration file {path} does not exist ({how})")
    return path


def read_file(path: Path) -> dict[str, Any]:
    """Parse a YAML configuration file and fold flat ``alias.prop`` keys into ``clusters``."""
    raw = read_yaml(path, "configuration file")
    if raw is None:  # nothing but blanks and comments: not "no clusters" by intent
        raise ConfigError(
            f"configuration file {path} is empty: add the clusters "
            "('dc-a.bootstrap.servers: host:9092', one line per property) or point "
            "--config at another file"
        )
    if not isinstance(raw, dict):
        raise ConfigError(f"configuration file {path} must hold a mapping of settings")
    data: dict[str, Any] = {}
    clusters: dict[str, dict[str, Any]] = {}
    for key, value in raw.items():
        key = str(key)
        if key == "clusters" and isinstance(value, dict):
            for alias, props in value.items():
                clusters.setdefault(str(alias), {}).update(props or {})
        elif key not in SECTIONS and "." in key:
            alias, prop = key.split(".", 1)
            clusters.setdefault(alias, {})[prop] = value
        else:
            data[key] = value
    if clusters:
        data["clusters"] = clusters
    return data


def load_settings(config: str | os.PathLike[str] | None = None, **overrides: Any) -> Settings:
    """Settings for this process; raises ConfigError naming field, value and fix."""
    source = config_source(config)
    file_data = read_file(source) if source else {}
    where = str(source) if source else "environment/defaults"
    token = FILE_DATA.set(file_data)
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as err:
        raise from_validation_error(err, where, Settings) from None
    finally:
        FILE_DATA.reset(token)
