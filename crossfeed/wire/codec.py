"""Avro codec for every value on an internal topic (docs/design.md, Wire contract).

Each value is written in the Avro *single-object encoding*::

    0xC3 0x01 | 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema | body

so a reader always knows which writer schema produced the bytes, and an old and a new
crossfeed can share a topic during a rolling upgrade. The schemas are the ``schemas/*.avsc``
files of the repository (one record per file), shipped inside the package as
``crossfeed/schemas`` (a symlink in the checkout, real files in a wheel) and read with
``importlib.resources``, so an installed crossfeed needs no checkout; ``$CROSSFEED_SCHEMAS_DIR``
points the default codec elsewhere. Older writer versions can be registered at
run time with :func:`register_writer_schema`. Decoding resolves the writer schema into the
current reader schema (Avro schema resolution: defaults fill fields the writer did not
have, fields the reader does not know are skipped).

Every failure is a :class:`CodecError` (a ``ValueError``); no fastavro, struct or EOF
exception escapes, so callers can route bad input to the dead-letter topic with one
``except CodecError``.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from io import BytesIO
from pathlib import Path
from typing import Any

import fastavro
from fastavro.schema import fingerprint as _fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from fastavro.validation import ValidationError, validate

__all__ = [
    "MAGIC",
    "SCHEMAS_DIR_ENV",
    "Codec",
    "CodecError",
    "decode",
    "decode_any",
    "default_codec",
    "default_schemas_dir",
    "encode",
    "fingerprint",
    "record_names",
    "register_writer_schema",
    "schema",
]

MAGIC = b"\xc3\x01"
"""Marker of the Avro single-object encoding (Avro spec, "Single object encoding")."""
SCHEMAS_DIR_ENV = "CROSSFEED_SCHEMAS_DIR"
"""Environment variable that points the default codec at another schemas directory."""

_HEADER_LEN = len(MAGIC) + 8
# Records written once per partition and transaction skip fastavro's full validation,
# which costs tens of µs (it tries every union branch) — several times the encoding
# itself. The cheap top-level checks in encode() still run. ChangeEvent is not among
# them: its values are unions whose branch decides a database column's type.
_HOT_RECORDS = frozenset({"ResolvedMark"})
# Value ranges of Avro's numeric types; fastavro's writer would silently write a float
# (truncated), a bool or an out-of-range int into an int/long field.
_INT_RANGES = {"int": (-(2**31), 2**31 - 1), "long": (-(2**63), 2**63 - 1)}
_MAX_MESSAGE = 300  # characters of one error detail; values can be megabytes of bytes


class CodecError(ValueError):
    """A value could not be encoded or decoded; the message says why and what to do."""


@dataclass(frozen=True)
class _Version:
    """One schema version of a record: the parsed fastavro schema and its fingerprint."""

    record: str
    fingerprint: bytes  # 8 bytes, little-endian, as written after MAGIC
    parsed: dict[str, Any]


@dataclass(frozen=True)
class _Record:
    """The current (reader and writer) version of a record plus what encode checks."""

    version: _Version
    raw: dict[str, Any]
    header: bytes
    # Checks fastavro's writer lacks (see _INT_RANGES) or words badly (enums).
    scalars: tuple[tuple[str, str, frozenset[str]], ...]
    full_validation: bool
    required: tuple[str, ...]  # fields without a default, for "missing field" messages


def _fingerprint_of(raw: Mapping[str, Any]) -> bytes:
    # fastavro returns the CRC-64-AVRO (Rabin) fingerprint as the hex of its
    # little-endian bytes, which is exactly the byte order the single-object encoding
    # wants (checked against the Avro spec's test vector in tests/unit/wire/test_codec.py).
    canonical = to_parsing_canonical_form(dict(raw))
    return bytes.fromhex(_fastavro_fingerprint(canonical, "CRC-64-AVRO"))


def _fp_text(fp: bytes) -> str:
    return f"0x{int.from_bytes(fp, 'little'):016x}"


def _short(text: object) -> str:
    s = str(text)
    return s if len(s) <= _MAX_MESSAGE else s[: _MAX_MESSAGE - 3] + "..."


def _tidy(message: str) -> str:
    """Shorten a fastavro validation message: it prints classes as <class 'str'> and the
    whole expected schema (docs included) where its type name says enough."""
    message = re.sub(r"<class '([\w.]+)'>", r"\1", message)
    message = re.sub(r"expected \{'type': '(\w+)'.*", r"expected \1", message)
    return _short(message)


def _short_name(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _parse(record_name: str, raw: Mapping[str, Any], origin: str) -> _Version:
    """Parse one schema version; each gets its own named-types table so that two versions
    of the same record (both defining dev.crossfeed.X) never clash."""
    if raw.get("type") != "record" or _short_name(str(raw.get("name", ""))) != record_name:
        raise CodecError(
            f"{origin}: expected an Avro record named {record_name!r}, "
            f"got type {raw.get('type')!r} named {raw.get('name')!r}"
        )
    try:
        parsed = fastavro.parse_schema(copy.deepcopy(dict(raw)))
        fp = _fingerprint_of(raw)
    except Exception as exc:
        raise CodecError(f"{origin}: invalid Avro schema for {record_name}: {exc}") from exc
    if not isinstance(parsed, dict):  # cannot happen for a record; keeps the type exact
        raise CodecError(f"{origin}: {record_name} did not parse to an Avro record")
    return _Version(record_name, fp, parsed)


def _scalar_checks(raw: Mapping[str, Any]) -> tuple[tuple[str, str, frozenset[str]], ...]:
    """(field, kind, enum symbols) for the top-level int/long/boolean/enum fields."""
    checks = []
    for f in raw["fields"]:
        t = f["type"]
        if t in ("int", "long", "boolean"):
            checks.append((str(f["name"]), str(t), frozenset[str]()))
        elif isinstance(t, dict) and t.get("type") == "enum":
            checks.append((str(f["name"]), "enum", frozenset(t["symbols"])))
    return tuple(checks)


class Codec:
    """Encoder/decoder over one schemas directory. Most code uses the module functions,
    which share one default instance; tests build their own to use other schema sets."""

    def __init__(self, schemas_dir: Traversable | str) -> None:
        # A Traversable, not only a Path: package resources need not be plain files.
        self.schemas_dir = Path(schemas_dir) if isinstance(schemas_dir, str) else schemas_dir
        self._records: dict[str, _Record] = {}
        # Every known writer version of every record, by fingerprint.
        self._writers: dict[bytes, _Version] = {}
        try:
            found = [e for e in self.schemas_dir.iterdir() if e.name.endswith(".avsc")]
        except OSError:
            found = []  # a missing directory says the same as an empty one
        if not found:
            raise CodecError(
                f"no Avro schemas (*.avsc) in {self.schemas_dir}; unset {SCHEMAS_DIR_ENV} "
                "to use the schemas shipped with crossfeed, or point it at a directory "
                "holding them"
            )
        for entry in sorted(found, key=lambda e: e.name):
            self._load(entry)

    def _load(self, entry: Traversable) -> None:
        where = f"{self.schemas_dir}/{entry.name}"
        record_name = entry.name.removesuffix(".avsc")
        try:
            raw = json.loads(entry.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CodecError(f"cannot read schema {where}: {exc}") from exc
        if not isinstance(raw, dict):
            raise CodecError(f"{where}: expected a JSON object holding one Avro record")
        version = _parse(record_name, raw, where)
        self._records[record_name] = _Record(
            version=version,
            raw=raw,
            header=MAGIC + version.fingerprint,
            scalars=_scalar_checks(raw),
            full_validation=record_name not in _HOT_RECORDS,
            required=tuple(f["name"] for f in raw["fields"] if "default" not in f),
        )
        self._writers[version.fingerprint] = version

    # -- introspection -------------------------------------------------------------

    def record_names(self) -> list[str]:
        """Names of the known records (the .avsc file stems), sorted."""
        return sorted(self._records)

    def _record(self, record_name: str) -> _Record:
        rec = self._records.get(record_name)
        if rec is None:
            raise CodecError(
                f"unknown record {record_name!r}; known: {', '.join(self.record_names())}"
            )
        return rec

    def schema(self, record_name: str) -> dict[str, Any]:
        """A copy of the current schema of ``record_name`` as written in its .avsc file."""
        return copy.deepcopy(self._record(record_name).raw)

    def fingerprint(self, record_name: str) -> int:
        """CRC-64-AVRO fingerprint of the current schema of ``record_name`` (unsigned)."""
        return int.from_bytes(self._record(record_name).version.fingerprint, "little")

    def header(self, record_name: str) -> bytes:
        """The single-object encoding's prefix of ``record_name``'s current schema (the
        marker and its fingerprint)."""
        return self._record(record_name).header

    def register_writer_schema(self, record_name: str, schema: Mapping[str, Any]) -> int:
        """Make bytes written with another version of ``record_name`` decodable (e.g. an
        older release's schema). Returns that version's fingerprint."""
        self._record(record_name)  # the reader side must exist
        version = _parse(record_name, schema, f"writer schema for {record_name}")
        known = self._writers.get(version.fingerprint)
        if known is not None and known.record != record_name:
            raise CodecError(
                f"writer schema for {record_name} has the fingerprint of {known.record}"
            )
        # Keep an existing entry: the current version must stay the one used for it.
        self._writers.setdefault(version.fingerprint, version)
        return int.from_bytes(version.fingerprint, "little")

    # -- encode --------------------------------------------------------------------

    def encode(self, record_name: str, value: Mapping[str, Any], *, checked: bool = False) -> bytes:
        """Single-object encoding of ``value`` with the current schema of ``record_name``.

        ``checked``: the caller has already checked every value's type and range (e.g.
        ``crossfeed.wire.changes.Table``), so fastavro's full validation — most of the
        cost of a ChangeEvent — is skipped; the cheap top-level checks still run.
        """
        rec = self._records.get(record_name)
        if rec is None:
            rec = self._record(record_name)  # raises with the list of known records
        try:
            for name, kind, symbols in rec.scalars:
                v = value.get(name)
                if v is None:
                    continue  # missing: the writer raises unless the field has a default
                # `type(v) is` rejects bool for int and int for boolean, as Avro does.
                if kind == "enum":
                    if v not in symbols:
                        raise self._field_error(rec, name, f"one of {sorted(symbols)}", v)
                elif kind == "boolean":
                    if type(v) is not bool:
                        raise self._field_error(rec, name, kind, v)
                else:
                    lo, hi = _INT_RANGES[kind]
                    if type(v) is not int or not lo <= v <= hi:
                        raise self._field_error(rec, name, kind, v)
            if rec.full_validation and not checked:
                validate(value, rec.version.parsed, raise_errors=True)
            buf = BytesIO()
            buf.write(rec.header)
            # strict_allow_default: a misspelt field name is an error, not silently
            # dropped (and replaced by the default of the field it was meant to be).
            fastavro.schemaless_writer(buf, rec.version.parsed, value, strict_allow_default=True)
        except CodecError:
            raise
        except Exception as exc:
            raise self._encode_error(rec, value, exc) from exc
        return buf.getvalue()

    @staticmethod
    def _field_error(rec: _Record, name: str, kind: str, v: object) -> CodecError:
        detail = f"{type(v).__name__} {_short(repr(v))}"
        if kind in _INT_RANGES and type(v) is int:
            detail += " (out of range)"
        return CodecError(
            f"cannot encode {rec.version.record}: field {name!r}: expected {kind}, got {detail}"
        )

    @staticmethod
    def _encode_error(rec: _Record, value: object, exc: Exception) -> CodecError:
        """Explain a failed encode, naming the field. Error path only, so it may be slow."""
        name = rec.version.record
        if not isinstance(value, Mapping):
            return CodecError(
                f"cannot encode {name}: expected a mapping, got {type(value).__name__}"
            )
        missing = [f for f in rec.required if f not in value]
        if missing:
            return CodecError(f"cannot encode {name}: missing field(s) {', '.join(missing)}")
        # The writer's own messages are terse; fastavro's validator names the field path.
        errors: list[str] = []
        if isinstance(exc, ValidationError):
            errors = [str(e) for e in exc.errors]
        else:
            try:
                validate(value, rec.version.parsed, raise_errors=True)
            except ValidationError as verr:
                errors = [str(e) for e in verr.errors]
            except Exception:
                pass
        if errors:
            return CodecError(f"cannot encode {name}: {'; '.join(_tidy(e) for e in errors)}")
        return CodecError(f"cannot encode {name}: {type(exc).__name__}: {_short(exc)}")

    # -- decode --------------------------------------------------------------------

    def decode(self, record_name: str, data: bytes) -> dict[str, Any]:
        """Decode a value that must be a ``record_name``, into its current schema."""
        return self._read(data, record_name)[1]

    def decode_any(self, data: bytes) -> tuple[str, dict[str, Any]]:
        """Decode a value of any known record (topics such as ``_crossfeed.state`` and
        ``<feed>.changes`` carry several); returns (record name, value)."""
        return self._read(data, None)

    def _read(self, data: bytes, expected: str | None) -> tuple[str, dict[str, Any]]:
        if expected is not None and expected not in self._records:
            self._record(expected)  # raises: unknown record name
        what = expected or "value"
        if not data:
            raise CodecError(f"cannot decode {what}: empty payload (a tombstone?)")
        if len(data) < _HEADER_LEN:
            raise CodecError(
                f"cannot decode {what}: truncated payload ({len(data)} bytes, "
                f"the single-object header alone is {_HEADER_LEN})"
            )
        if data[:2] != MAGIC:
            raise CodecError(
                f"cannot decode {what}: not a crossfeed Avro value (starts with "
                f"{bytes(data[:2]).hex()}, expected {MAGIC.hex()})"
            )
        fp = bytes(data[2:_HEADER_LEN])
        writer = self._writers.get(fp)
        if writer is None:
            raise CodecError(
                f"cannot decode {what}: written with a schema this reader does not know: "
                f"fingerprint {_fp_text(fp)}; upgrade crossfeed or register the writer schema"
            )
        if expected is not None and writer.record != expected:
            raise CodecError(f"cannot decode {expected}: the payload is a {writer.record}")
        reader = self._records[writer.record].version
        buf = BytesIO(data)
        buf.seek(_HEADER_LEN)
        try:
            # reader_schema=None when the writer is the current version: no resolution,
            # and fastavro skips comparing the two schema dicts.
            value = fastavro.schemaless_reader(
                buf, writer.parsed, None if writer is reader else reader.parsed
            )
        except Exception as exc:
            raise CodecError(
                f"cannot decode {writer.record} (writer fingerprint {_fp_text(fp)}): "
                f"corrupt or truncated body: {type(exc).__name__}: {_short(exc)}"
            ) from exc
        if buf.tell() != len(data):
            raise CodecError(
                f"cannot decode {writer.record}: {len(data) - buf.tell()} bytes of trailing "
                "garbage after the record"
            )
        if not isinstance(value, dict):  # a record schema always reads as a dict
            raise CodecError(f"cannot decode {writer.record}: body is not a record")
        return writer.record, value


def default_schemas_dir() -> Traversable:
    """``$CROSSFEED_SCHEMAS_DIR`` when set, else the schemas shipped in the package."""
    override = os.environ.get(SCHEMAS_DIR_ENV)
    if override:
        return Path(override)
    return files("crossfeed") / "schemas"


@functools.cache
def default_codec() -> Codec:
    """The shared codec over the shipped schemas (or ``$CROSSFEED_SCHEMAS_DIR``),
    loaded once on first use. ``default_codec.cache_clear()`` reloads it."""
    return Codec(default_schemas_dir())


def encode(record_name: str, value: Mapping[str, Any], *, checked: bool = False) -> bytes:
    """Single-object encoding of ``value`` as the current version of ``record_name``."""
    return default_codec().encode(record_name, value, checked=checked)


def decode(record_name: str, data: bytes) -> dict[str, Any]:
    """Decode ``data`` (which must hold a ``record_name``) into the current schema."""
    return default_codec().decode(record_name, data)


def decode_any(data: bytes) -> tuple[str, dict[str, Any]]:
    """Decode a value of any known record; returns (record name, value)."""
    return default_codec().decode_any(data)


def register_writer_schema(record_name: str, schema: Mapping[str, Any]) -> int:
    """Let the default codec decode bytes written with another version of a record."""
    return default_codec().register_writer_schema(record_name, schema)


def record_names() -> list[str]:
    """Names of the known records, sorted."""
    return default_codec().record_names()


def fingerprint(record_name: str) -> int:
    """CRC-64-AVRO fingerprint of the current schema of ``record_name``."""
    return default_codec().fingerprint(record_name)


def schema(record_name: str) -> dict[str, Any]:
    """A copy of the current schema of ``record_name``."""
    return default_codec().schema(record_name)
