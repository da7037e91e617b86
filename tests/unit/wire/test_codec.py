"""Avro records of the internal topics and their single-object codec (crossfeed.wire.codec)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import to_parsing_canonical_form
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.wire import codec
from crossfeed.wire.codec import MAGIC, Codec, CodecError

pytestmark = pytest.mark.unit

SCHEMAS_DIR = Path(__file__).resolve().parents[3] / "schemas"
CLUSTER = "lkc-Zb3_9xQ2TmW-aVd1Ow"

# One full value per record; the round-trip test fails if a record has no sample.
SAMPLES: dict[str, dict[str, Any]] = {
    "ChangeEvent": {
        "table": "accounts",
        "op": "update",
        "schema_version": 2,
        "columns": [
            {"name": "id", "type": "long", "primary_key": True, "nullable": False},
            {"name": "balance", "type": "long", "primary_key": False, "nullable": True},
            {"name": "note", "type": "string", "primary_key": False, "nullable": True},
            {"name": "blob", "type": "bytes", "primary_key": False, "nullable": True},
        ],
        "key": {"id": 2**40},
        "before": {
            "id": 2**40,
            "balance": -5,
            "note": None,
            "blob": {"data": bytes(range(256)) * 4},
        },
        "after": {"id": 2**40, "balance": 7, "note": "é", "blob": {"data": b""}},
        "ddl": None,
    },
    "ResolvedMark": {
        "source_cluster": CLUSTER,
        "topic": "orders",
        "partition": 0,
        "resolved_ts_us": 1_700_000_000_000_000,
        "next_offset": 42,
    },
    "OffsetSync": {
        "source_cluster": CLUSTER,
        "topic": "orders",
        "partition": 1,
        "source_start": 100,
        "source_end": 199,
        "target_topic": "orders",
        "target_partition": 1,
        "target_start": 7,
        "feed": "east-west",
    },
    "GroupCheckpoint": {
        "feed": "east-west",
        "group": "billing/app",
        "topic": "orders",
        "partition": 1,
        "source_offset": 150,
        "target_topic": "orders",
        "target_partition": 1,
        "target_offset": 57,
        "exact": True,
        "gap_records": 0,
        "source_cluster": CLUSTER,
        "translated_at_ms": 1_700_000_000_999,
        "source_log_start": 120,
    },
    "ConsumerTimestamp": {
        "group": "billing",
        "topic": "orders",
        "partition": 2,
        "committed_offset": 10,
        "timestamp_ms": 1_700_000_000_000,
        "committed_at_ms": 1_700_000_000_500,
    },
    "FeedSpec": {
        "name": "east-west",
        "source": "dc-a",
        "sink_uri": "kafka://dc-b",
        "mode": "ordered",
        "topics": ["orders", "pay\\..*"],
        "exclude": [],
        "rename_format": "dc-a.${topic}",
        "start": "latest",
        "config": {"errors.tolerance": "none", "lateness.ms": "500"},
        "created_at_ms": 1_700_000_000_000,
    },
    "Assignment": {
        "feed": "east-west",
        "role": "puller",
        "instance_id": "puller-host1-4242",
        "epoch": 5,
        "generation": 12,
        "partitions": [{"topic": "orders", "partition": 0}, {"topic": "orders", "partition": 1}],
    },
    "Heartbeat": {
        "instance_id": "sink-host2-77",
        "role": "sink",
        "host": "host2",
        "pid": 77,
        "version": "0.1.0",
        "started_at_ms": 1_700_000_000_000,
        "sent_at_ms": 1_700_000_001_000,
        "tasks": ["east-west/sink/0"],
        "feeds": ["east-west"],
        "state": "running",
        "address": "127.0.0.1:18102",
        "checkpoints": {"orders/3": 1_700_000_000_000_000},
        "resolved": {"orders/4": 1_700_000_000_000_100},
        "laggards": {"orders/5": 1_700_000_000_000_200},
        "last_error": "",
        "checkpoint_ts_us": 1_700_000_000_000_500,
        "syncpoint_ts_us": 1_700_000_000_000_400,
        "syncpoint_at_ms": 1_700_000_002_000,
        "notices": ["orders/3: offsets 120-199 (80 records) were deleted at the source"],
        "idle_since_us": 1_700_000_001_000_000,
    },
    "FeedStatus": {
        "feed": "east-west",
        "state": "failed_over",
        "last_error": "dc-a unreachable",
        "resolved_ts_us": 3,
        "checkpoint_ts_us": 2,
        "consistency_ts_us": 1,
        "updated_at_ms": 1_700_000_000_000,
        "leader_epoch": 9,
    },
    "Lease": {
        "holder": "coordinator-host1-1",
        "epoch": 9,
        "acquired_at_ms": 1_700_000_000_000,
        "renewed_at_ms": 1_700_000_005_000,
        "ttl_ms": 10_000,
    },
}


def _payload(record: str = "ChangeEvent") -> bytes:
    return codec.encode(record, SAMPLES[record])


def _raw_schemas() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(SCHEMAS_DIR.glob("*.avsc"))}


def _single_object(schema: dict[str, Any], value: dict[str, Any]) -> bytes:
    """Encode with an arbitrary schema version, independently of the codec under test."""
    buf = io.BytesIO()
    buf.write(MAGIC + _rabin(to_parsing_canonical_form(schema).encode()).to_bytes(8, "little"))
    fastavro.schemaless_writer(buf, fastavro.parse_schema(copy.deepcopy(schema)), value)
    return buf.getvalue()


def _with_new_field(schema: dict[str, Any]) -> dict[str, Any]:
    """The "next version" of a schema: one added field with a default (the rule)."""
    newer = copy.deepcopy(schema)
    newer["fields"].append(
        {"name": "added_later", "type": "long", "default": 7, "doc": "Added in a later version."}
    )
    return newer


# Reference CRC-64-AVRO (Rabin) from the algorithm in the Avro specification, so the
# codec's fingerprints (computed by fastavro) are checked against an independent one.
_EMPTY64 = 0xC15D213AA4D7A795
_TABLE = []
for _i in range(256):
    _fp = _i
    for _ in range(8):
        _fp = (_fp >> 1) ^ (_EMPTY64 & -(_fp & 1))
    _TABLE.append(_fp)


def _rabin(data: bytes) -> int:
    fp = _EMPTY64
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


@pytest.fixture
def fresh_default_codec() -> Iterator[None]:
    """Tests that register schemas or change the env get their own default codec."""
    codec.default_codec.cache_clear()
    yield
    codec.default_codec.cache_clear()


# -- schemas --------------------------------------------------------------------------


def test_record_names_are_the_avsc_files_and_all_have_samples() -> None:
    assert codec.record_names() == sorted(_raw_schemas())
    assert sorted(SAMPLES) == codec.record_names()


def _walk_named(schema: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every named type (record, enum) in a schema, with a path for messages."""
    if isinstance(schema, list):
        for branch in schema:
            yield from _walk_named(branch, where)
    elif isinstance(schema, dict):
        if schema.get("type") in ("record", "enum"):
            yield f"{where}:{schema['name']}", schema
        for f in schema.get("fields", []):
            yield from _walk_named(f["type"], f"{where}.{f['name']}")
        for key in ("items", "values"):
            if key in schema:
                yield from _walk_named(schema[key], where)


@pytest.mark.parametrize("name", sorted(_raw_schemas()))
def test_every_record_and_field_has_a_doc(name: str) -> None:
    schema = _raw_schemas()[name]
    assert schema["namespace"] == "dev.crossfeed"
    assert schema["name"] == name, "file name must be the record name"
    for where, named in _walk_named(schema, name):
        assert str(named.get("doc", "")).strip(), f"{where} has no doc"
        for f in named.get("fields", []):
            assert str(f.get("doc", "")).strip(), f"{where}.{f['name']} has no doc"


def test_readme_lists_every_record() -> None:
    readme = (SCHEMAS_DIR / "README.md").read_text()
    for name in codec.record_names():
        assert f"`{name}`" in readme


def test_fingerprints_are_crc64_avro_of_the_canonical_form() -> None:
    # Test vector of the Avro specification for the schema "null".
    assert _rabin(b'"null"') == 7195948357588979594
    for name, schema in _raw_schemas().items():
        assert codec.fingerprint(name) == _rabin(to_parsing_canonical_form(schema).encode())


# -- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_round_trip_every_record(name: str) -> None:
    data = codec.encode(name, SAMPLES[name])
    assert data[:2] == MAGIC
    assert int.from_bytes(data[2:10], "little") == codec.fingerprint(name)
    assert codec.decode(name, data) == SAMPLES[name]
    assert codec.decode_any(data) == (name, SAMPLES[name])


def test_encode_fills_defaults() -> None:
    value = {k: v for k, v in SAMPLES["FeedStatus"].items() if not k.endswith("_ts_us")}
    del value["last_error"]
    decoded = codec.decode("FeedStatus", codec.encode("FeedStatus", value))
    assert decoded["last_error"] is None
    assert decoded["resolved_ts_us"] == decoded["consistency_ts_us"] == 0


_values = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.text()
    | st.builds(lambda b: {"data": b}, st.binary())
)
_rows = st.dictionaries(st.text(max_size=20), _values, max_size=6)
_change_events = st.fixed_dictionaries(
    {
        "table": st.text(max_size=63),
        "op": st.sampled_from(["insert", "update", "delete", "ddl"]),
        "schema_version": st.integers(0, 2**31 - 1),
        "columns": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.text(max_size=20),
                    "type": st.sampled_from(["boolean", "long", "double", "string", "bytes"]),
                    "primary_key": st.booleans(),
                    "nullable": st.booleans(),
                }
            ),
            max_size=6,
        ),
        "key": _rows,
        "before": st.none() | _rows,
        "after": st.none() | _rows,
        "ddl": st.none() | st.text(max_size=40),
    }
)


@given(_change_events)
@settings(max_examples=300)
def test_change_event_round_trip(event: dict[str, Any]) -> None:
    # Every value branch survives: null, bool, long, str and bytes stay what they were.
    assert codec.decode("ChangeEvent", codec.encode("ChangeEvent", event)) == event


# -- schema evolution -----------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_old_reader_reads_new_writer_after_registering_it(
    name: str, fresh_default_codec: None
) -> None:
    newer = _with_new_field(_raw_schemas()[name])
    data = _single_object(newer, {**SAMPLES[name], "added_later": 99})
    with pytest.raises(CodecError, match="register the writer schema"):
        codec.decode(name, data)
    fp = codec.register_writer_schema(name, newer)
    assert fp == int.from_bytes(data[2:10], "little") != codec.fingerprint(name)
    # The field the reader does not know is skipped; everything else is intact.
    assert codec.decode(name, data) == SAMPLES[name]
    assert codec.decode_any(data) == (name, SAMPLES[name])


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_new_reader_reads_old_writer(name: str, tmp_path: Path) -> None:
    for stem, schema in _raw_schemas().items():
        newer = _with_new_field(schema) if stem == name else schema
        (tmp_path / f"{stem}.avsc").write_text(json.dumps(newer))
    new_codec = Codec(tmp_path)
    old_bytes = codec.encode(name, SAMPLES[name])  # the repository's schema = old writer
    with pytest.raises(CodecError, match="does not know: fingerprint 0x"):
        new_codec.decode(name, old_bytes)
    new_codec.register_writer_schema(name, _raw_schemas()[name])
    # The field the writer did not have takes its default.
    assert new_codec.decode(name, old_bytes) == {**SAMPLES[name], "added_later": 7}
    # And the new codec writes the new version, which the old one cannot read unaided.
    new_bytes = new_codec.encode(name, {**SAMPLES[name], "added_later": 1})
    assert new_codec.decode(name, new_bytes)["added_later"] == 1


def test_schemas_dir_env_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_default_codec: None
) -> None:
    (tmp_path / "Lease.avsc").write_text(json.dumps(_with_new_field(_raw_schemas()["Lease"])))
    monkeypatch.setenv(codec.SCHEMAS_DIR_ENV, str(tmp_path))
    assert codec.record_names() == ["Lease"]
    assert codec.decode("Lease", codec.encode("Lease", SAMPLES["Lease"]))["added_later"] == 7


def test_register_writer_schema_refuses_wrong_schemas(fresh_default_codec: None) -> None:
    lease = _raw_schemas()["Lease"]
    with pytest.raises(CodecError, match="named 'Heartbeat'"):
        codec.register_writer_schema("Heartbeat", lease)
    with pytest.raises(CodecError, match="unknown record 'Nope'"):
        codec.register_writer_schema("Nope", lease)
    broken = copy.deepcopy(lease)
    broken["fields"][0]["type"] = "no-such-type"
    with pytest.raises(CodecError, match="invalid Avro schema"):
        codec.register_writer_schema("Lease", broken)


def test_incompatible_writer_is_a_codec_error(fresh_default_codec: None) -> None:
    # A newer writer with an enum symbol the reader lacks: resolution fails cleanly.
    newer = copy.deepcopy(_raw_schemas()["FeedStatus"])
    newer["fields"][1]["type"]["symbols"].append("archived")
    codec.register_writer_schema("FeedStatus", newer)
    data = _single_object(newer, {**SAMPLES["FeedStatus"], "state": "archived"})
    with pytest.raises(CodecError, match="archived"):
        codec.decode("FeedStatus", data)


# -- bad input ------------------------------------------------------------------------


def test_every_truncation_is_a_codec_error() -> None:
    data = _payload()
    for n in range(len(data)):
        with pytest.raises(CodecError):
            codec.decode("ChangeEvent", data[:n])
        with pytest.raises(CodecError):
            codec.decode_any(data[:n])


@pytest.mark.parametrize("name", ["ChangeEvent", "FeedSpec", "Assignment"])
def test_flipped_bytes_never_raise_anything_but_codec_error(name: str) -> None:
    payload = _payload(name)
    for i in range(len(payload)):
        for mask in (0x01, 0x80, 0xFF):
            corrupt = bytearray(payload)
            corrupt[i] ^= mask
            try:
                codec.decode_any(bytes(corrupt))
            except CodecError:
                # Flips in the 10-byte header are always detected; one inside a bytes
                # value may still decode (Avro has no checksum), which is fine here.
                continue
            assert i >= 10, f"flip at header byte {i} went unnoticed"


@given(st.binary(max_size=200))
def test_random_bodies_never_raise_anything_but_codec_error(body: bytes) -> None:
    for name in ("ChangeEvent", "FeedSpec", "Assignment", "FeedStatus"):
        header = MAGIC + codec.fingerprint(name).to_bytes(8, "little")
        with contextlib.suppress(CodecError):
            codec.decode(name, header + body)


def test_huge_length_prefix_is_a_codec_error() -> None:
    header = MAGIC + codec.fingerprint("Lease").to_bytes(8, "little")
    # zig-zag varint of a 2**62-byte string for "holder", then nothing.
    with pytest.raises(CodecError, match="corrupt or truncated body"):
        codec.decode("Lease", header + b"\xff\xff\xff\xff\xff\xff\xff\xff\x7f")


def test_trailing_garbage() -> None:
    with pytest.raises(CodecError, match="1 bytes of trailing garbage"):
        codec.decode("ChangeEvent", _payload() + b"\x00")


def test_empty_and_wrong_magic() -> None:
    with pytest.raises(CodecError, match="empty payload"):
        codec.decode("ChangeEvent", b"")
    with pytest.raises(CodecError, match="not a crossfeed Avro value"):
        codec.decode("ChangeEvent", b"\x00\x01" + _payload()[2:])
    with pytest.raises(CodecError, match="not a crossfeed Avro value"):
        codec.decode_any(b'{"json": "is not avro"}')


def test_unknown_fingerprint() -> None:
    data = MAGIC + (0x1234_5678_9ABC_DEF0).to_bytes(8, "little") + _payload()[10:]
    with pytest.raises(CodecError) as info:
        codec.decode("ChangeEvent", data)
    assert str(info.value) == (
        "cannot decode ChangeEvent: written with a schema this reader does not know: "
        "fingerprint 0x123456789abcdef0; upgrade crossfeed or register the writer schema"
    )


def test_decode_as_the_wrong_record() -> None:
    with pytest.raises(CodecError, match="cannot decode ChangeEvent: the payload is a Lease"):
        codec.decode("ChangeEvent", _payload("Lease"))


def test_unknown_record_name() -> None:
    with pytest.raises(CodecError, match="unknown record 'Nope'; known: Assignment, "):
        codec.encode("Nope", {})
    with pytest.raises(CodecError, match="unknown record"):
        codec.decode("Nope", _payload())


def _replace(record: str, **changes: Any) -> dict[str, Any]:
    return {**SAMPLES[record], **changes}


def _without(record: str, field: str) -> dict[str, Any]:
    return {k: v for k, v in SAMPLES[record].items() if k != field}


@pytest.mark.parametrize(
    ("record", "value", "field"),
    [
        ("ChangeEvent", _replace("ChangeEvent", schema_version="3"), "schema_version"),
        ("ChangeEvent", _replace("ChangeEvent", schema_version=2**31), "schema_version"),
        ("ChangeEvent", _replace("ChangeEvent", schema_version=1.5), "schema_version"),
        ("ChangeEvent", _replace("ChangeEvent", op="upsert"), "op"),
        ("ChangeEvent", _replace("ChangeEvent", table=b"accounts"), "table"),
        ("ChangeEvent", _replace("ChangeEvent", key={"id": [1]}), "key"),
        ("ChangeEvent", _replace("ChangeEvent", after={"id": {"x": 1}}), "after"),
        ("ChangeEvent", _without("ChangeEvent", "table"), "table"),
        ("ChangeEvent", _replace("ChangeEvent", tabel="x"), "tabel"),
        ("ResolvedMark", _replace("ResolvedMark", resolved_ts_us=None), "resolved_ts_us"),
        ("GroupCheckpoint", _replace("GroupCheckpoint", exact=1), "exact"),
        (
            "Assignment",
            _replace("Assignment", partitions=[{"topic": "t", "partition": 0.5}]),
            "partition",
        ),
        ("Heartbeat", _replace("Heartbeat", tasks="task-1"), "tasks"),
        ("FeedSpec", _replace("FeedSpec", config={"k": 1}), "config"),
        ("FeedSpec", _replace("FeedSpec", mode="fast"), "mode"),
        ("FeedStatus", _without("FeedStatus", "feed"), "feed"),
    ],
)
def test_encode_bad_value_names_record_and_field(
    record: str, value: dict[str, Any], field: str
) -> None:
    with pytest.raises(CodecError) as info:
        codec.encode(record, value)
    message = str(info.value)
    assert message.startswith(f"cannot encode {record}: ")
    assert field in message


def test_encode_non_mapping() -> None:
    for record in ("ChangeEvent", "Lease"):
        with pytest.raises(CodecError, match=f"cannot encode {record}: expected a mapping"):
            codec.encode(record, [1, 2])  # type: ignore[arg-type]


def test_error_messages_stay_short_for_huge_values() -> None:
    with pytest.raises(CodecError) as info:
        codec.encode("Heartbeat", _replace("Heartbeat", host=b"x" * 1_000_000))
    assert len(str(info.value)) < 1000


def test_bad_schemas_dir(tmp_path: Path) -> None:
    with pytest.raises(CodecError, match="no Avro schemas"):
        Codec(tmp_path)
    (tmp_path / "Lease.avsc").write_text("{not json")
    with pytest.raises(CodecError, match="cannot read schema"):
        Codec(tmp_path)
    (tmp_path / "Lease.avsc").write_text(json.dumps(_raw_schemas()["Heartbeat"]))
    with pytest.raises(CodecError, match="expected an Avro record named 'Lease'"):
        Codec(tmp_path)


def test_missing_schemas_dir_says_how_to_fix_it(tmp_path: Path) -> None:
    with pytest.raises(CodecError, match=f"no Avro schemas .*unset {codec.SCHEMAS_DIR_ENV}"):
        Codec(tmp_path / "nowhere")


def test_default_schemas_are_the_packaged_copy_of_schemas_dir(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The wheel ships crossfeed/schemas; in the checkout it must be the top-level schemas/
    # itself (a symlink), so the two can never drift apart.
    monkeypatch.delenv(codec.SCHEMAS_DIR_ENV, raising=False)
    packaged = codec.default_schemas_dir()
    assert isinstance(packaged, Path)
    assert packaged.resolve() == SCHEMAS_DIR
    assert Codec(packaged).record_names() == sorted(_raw_schemas())
