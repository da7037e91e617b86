"""crossfeed.wire.change_writer writes, byte for byte, what the codec (fastavro) writes for
every ChangeEvent a Table builds; encode_change falls back to the codec for a ChangeEvent
schema it was not written for."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.wire import change_writer, codec
from crossfeed.wire.changes import (
    RECORD,
    Column,
    Table,
    _avro_value,
    _direct_header,
    decode_change,
    encode_change,
)

pytestmark = pytest.mark.unit

TYPES = ["boolean", "long", "double", "string", "bytes"]
NAMES = st.text(min_size=1, max_size=12)
VALUES = {
    "boolean": st.booleans(),
    "long": st.integers(-(2**63), 2**63 - 1),
    "double": st.floats() | st.integers(-(2**53), 2**53),
    "string": st.text(max_size=30),
    "bytes": st.binary(max_size=300),
}


@st.composite
def tables(draw: st.DrawFn) -> Table:
    names = draw(st.lists(NAMES, min_size=1, max_size=70, unique=True))  # > 63: two-byte counts
    keys = draw(st.integers(1, min(3, len(names))))
    columns = tuple(
        Column(
            name, draw(st.sampled_from(TYPES)), primary_key=i < keys, nullable=draw(st.booleans())
        )
        for i, name in enumerate(names)
    )
    return Table(draw(NAMES), columns, draw(st.integers(0, 2**31 - 2)))  # a ddl adds one


@st.composite
def rows(draw: st.DrawFn, table: Table) -> dict:
    row = {}
    for c in table.columns:
        if not c.primary_key and draw(st.booleans()):
            if c.nullable and draw(st.booleans()):
                row[c.name] = None
            continue  # left out
        row[c.name] = draw(VALUES[c.type])
    return row


@st.composite
def events(draw: st.DrawFn) -> list:
    table = draw(tables())
    before, after = draw(rows(table)), draw(rows(table))
    return [
        table.insert(after),
        table.update(before, after),
        table.update(None, after),
        table.delete(before),
        table.ddl(draw(st.text(max_size=40)), table.columns[: max(1, len(table.columns) - 1)])[0],
    ]


@settings(max_examples=300, deadline=None)
@given(events())
def test_the_direct_writer_gives_the_codecs_bytes(evs: list) -> None:
    header = codec.default_codec().header(RECORD)
    for event in evs:
        assert change_writer.write(header, event) == codec.encode(RECORD, _avro_value(event))
        back = decode_change(encode_change(event))
        for name in ("key", "before", "after"):  # NaN is not equal to itself
            assert repr(getattr(back, name)) == repr(getattr(event, name))
        assert (back.table, back.op, back.columns, back.ddl) == (
            event.table,
            event.op,
            event.columns,
            event.ddl,
        )


def test_the_edges_of_a_long_and_of_a_double() -> None:
    table = Table("t", (Column("id", "long", primary_key=True), Column("x", "double")))
    header = codec.default_codec().header(RECORD)
    for n, x in [(-(2**63), math.inf), (2**63 - 1, -math.inf), (0, math.nan), (-1, -0.0)]:
        event = table.insert({"id": n, "x": x})
        assert change_writer.write(header, event) == codec.encode(RECORD, _avro_value(event))


def test_a_version_beyond_an_avro_int_is_the_codecs_error() -> None:
    table = Table("t", (Column("id", "long", primary_key=True),), 2**31 - 1)
    event, _ = table.ddl("ALTER TABLE t ADD x bigint", table.columns)
    with pytest.raises(codec.CodecError, match="schema_version"):
        encode_change(event)


def test_another_change_event_schema_falls_back_to_the_codec(tmp_path: Path) -> None:
    for path in Path(str(codec.default_schemas_dir())).glob("*.avsc"):
        shutil.copy(path, tmp_path / path.name)
    schema = json.loads((tmp_path / "ChangeEvent.avsc").read_text())
    schema["fields"].append({"name": "note", "type": ["null", "string"], "default": None})
    (tmp_path / "ChangeEvent.avsc").write_text(json.dumps(schema))
    other = codec.Codec(tmp_path)
    assert _direct_header(other) is None
    assert _direct_header(codec.default_codec()) == codec.default_codec().header(RECORD)
