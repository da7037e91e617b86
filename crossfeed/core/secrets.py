"""Secrets: kept out of files by reference, kept out of answers and logs by masking.

References: a property value may be ``${env:NAME}`` (an environment variable) or
``${file:/path}`` (a file's content, trailing newline dropped — a mounted Kubernetes
Secret, a Docker secret), alone or inside a longer value::

    dc-a.sasl.password: ${env:DC_A_PASSWORD}
    dc-b.sasl.password: ${file:/run/secrets/dc-b-password}

Masking: the value of any property whose name says it holds a secret (``*password``,
``*secret``, ``*token``, ``sasl.jaas.config``, ``ssl.key.pem``) becomes ``****``, and so
does the password of a URI (``postgresql://app:****@db:5432/app``) or of a
``password=...`` pair anywhere in a text. A reference is not a secret and stays readable.

Pure: the environment and file reading are passed in.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final

MASK: Final = "****"

_SECRET_KEY = re.compile(r"(password|secret|token|sasl\.jaas\.config|ssl\.key\.pem)$", re.I)
_REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
# user:password@ in a URI (an @ inside a password is written %40 in a URI).
_URI_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<secret>[^\s@]*)@", re.I)
_PAIR_PASSWORD = re.compile(r"(?P<head>\bpassword\s*=\s*)(?P<secret>[^\s&;,'\"]+)", re.I)


class SecretError(ValueError):
    """A reference that cannot be resolved (unset variable, unreadable file)."""


def is_secret_key(key: str) -> bool:
    return bool(_SECRET_KEY.search(key))


def _hide(match: re.Match[str], tail: str = "") -> str:
    """The match with its ``secret`` group masked, unless that is a reference."""
    if _REFERENCE.fullmatch(match.group("secret")):
        return match.group(0)
    return match.group("head") + MASK + tail


def mask_text(text: str) -> str:
    """``text`` with every URI password and ``password=`` value replaced by ``****``."""
    text = _URI_PASSWORD.sub(lambda m: _hide(m, "@"), text)
    return _PAIR_PASSWORD.sub(_hide, text)


def mask_value(key: str, value: Any) -> Any:
    """What may be shown of ``key``'s ``value``."""
    if isinstance(value, str):
        if is_secret_key(key) and not _REFERENCE.fullmatch(value):
            return MASK
        return mask_text(value)
    if isinstance(value, Mapping):
        return masked(value)
    if isinstance(value, list):
        return [mask_value(key, v) for v in value]
    return value


def masked(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``properties`` (nested mappings too) safe to show."""
    return {str(k): mask_value(str(k), v) for k, v in properties.items()}


def resolve(
    value: str,
    env: Mapping[str, str],
    read_file: Callable[[str], str],
    *,
    where: str = "",
) -> str:
    """``value`` with its ``${env:…}`` and ``${file:…}`` references replaced."""

    def one(match: re.Match[str]) -> str:
        kind, name = match.group(1), match.group(2).strip()
        if kind == "env":
            if name not in env:
                raise SecretError(
                    f"{where or 'a value'} refers to ${{env:{name}}}, but {name} is not set: "
                    f"export {name}=... in the service's environment"
                )
            return env[name]
        try:
            return read_file(name).rstrip("\n")
        except OSError as err:
            raise SecretError(
                f"{where or 'a value'} refers to ${{file:{name}}}, which cannot be read "
                f"({err.strerror or err})"
            ) from None

    return _REFERENCE.sub(one, value)
