"""A client of a schema registry's Confluent-compatible API (Apicurio's ``/apis/ccompat/v7``,
Confluent's own): the Avro schemas that records in Confluent's wire format name by id,
each fetched once (``GET /schemas/ids/{id}``) and kept. The Debezium reader and the
PostgreSQL sink decode Debezium's Avro events through it (crossfeed/wire/confluent_avro.py)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from crossfeed.wire import confluent_avro, debezium
from crossfeed.wire.confluent_avro import AvroSchema

TIMEOUT_S = 10.0
T = TypeVar("T")


class UnknownSchemaId(LookupError):
    """The registry does not know the id a record names (or holds no Avro schema under
    it): the record is a dead letter."""


class RegistryUnavailable(RuntimeError):
    """The registry did not answer (or answered with a server error): whoever reads waits
    and tries again, nothing is a dead letter for it."""


class SchemaRegistry:
    """Avro schemas by id from the registry at ``url`` (its Confluent-compatible API)."""

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._schemas: dict[int, AvroSchema] = {}
        self.fetched = 0  # schemas read from the registry (each id once)

    def schema(self, sid: int) -> AvroSchema:
        found = self._schemas.get(sid)
        if found is None:
            answer = self._get(f"/schemas/ids/{sid}", what=f"schema id {sid}")
            if answer.get("schemaType", "AVRO") != "AVRO" or "schema" not in answer:
                raise UnknownSchemaId(f"schema id {sid} in {self.url} is not an Avro schema")
            try:
                found = AvroSchema.of(sid, str(answer["schema"]))
            except ValueError as err:
                raise UnknownSchemaId(f"{err} ({self.url})") from None
            self._schemas[sid] = found
            self.fetched += 1
        return found

    def decode(self, value: bytes) -> Any:
        """A record in Confluent's wire format, decoded; UnknownSchemaId, ValueError (not
        that format, or a body that does not decode), RegistryUnavailable."""
        sid = confluent_avro.schema_id(value)
        if sid is None:
            raise ValueError("not in Confluent's wire format (magic byte 0, 4-byte schema id)")
        return self.schema(sid).decode(value)

    def subjects(self) -> list[str]:
        found = self._get("/subjects", what="the subjects")
        return [str(s) for s in found] if isinstance(found, list) else []

    def _get(self, path: str, *, what: str) -> Any:
        try:
            with urllib.request.urlopen(self.url + path, timeout=self.timeout_s) as answer:
                return json.loads(answer.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise UnknownSchemaId(f"{what} is not in the schema registry {self.url}") from None
            raise RegistryUnavailable(
                f"the schema registry {self.url} answered HTTP {err.code} for {what}"
            ) from None
        except (urllib.error.URLError, OSError) as err:
            raise RegistryUnavailable(
                f"the schema registry {self.url} did not answer for {what}: {err}"
            ) from None
        except ValueError as err:
            raise RegistryUnavailable(
                f"the schema registry {self.url} answered no JSON for {what}: {err}"
            ) from None


def read_debezium(
    value: bytes | None,
    registry: SchemaRegistry | None,
    of_json: Callable[[bytes | None], T],
    of_record: Callable[[Any], T],
) -> T:
    """What ``of_json`` reads of a Debezium record written by the JSON converter, or
    ``of_record`` of one in Confluent's wire format, decoded with its schema from
    ``registry`` (crossfeed/wire/debezium.py has both kinds of function). NotDebezium for
    an Avro record whose schema the registry does not know (or with no registry);
    RegistryUnavailable if the registry does not answer."""
    if confluent_avro.schema_id(value) is None:
        return of_json(value)
    assert value is not None
    if registry is None:
        raise debezium.NotDebezium(
            "an Avro record (Confluent's wire format), but the feed names no schema.registry.url"
        )
    try:
        return of_record(registry.decode(value))
    except (UnknownSchemaId, ValueError) as err:
        raise debezium.NotDebezium(str(err)) from None
