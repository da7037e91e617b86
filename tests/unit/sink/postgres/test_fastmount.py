"""The mounter's fast path (fastmount.py) against the ordinary one (codec + mapping.mount):
whatever the fast path accepts, it turns into the very row change the ordinary path
gives; everything else (misfits, undecodable bytes, other schemas, ddl) it leaves to the
ordinary path."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from crossfeed.services.sink.postgres.fastmount import CHANGE_EVENT_FINGERPRINT, FastMounter
from crossfeed.services.sink.postgres.mapping import Misfit, Mounter, RowChange
from crossfeed.wire import codec
from crossfeed.wire.codec import CodecError
from tests.support.sorted_stream import FastChangeEvents, change_event

pytestmark = pytest.mark.unit

COLS = [("id", "long", True), ("name", "string", False), ("blob", "bytes", False)]


def ordinary(value: bytes, commit_ts: int) -> RowChange | str:
    """The ordinary path's row change, or the error class it reports."""
    try:
        return Mounter().mount(codec.decode("ChangeEvent", value), commit_ts)
    except CodecError:
        return "UndecodableValue"
    except Misfit as err:
        return err.error_class


def _nan_free(value: Any) -> Any:
    # A corrupted double can read as NaN on both paths, and NaN != NaN: compare it as a mark.
    if isinstance(value, float) and math.isnan(value):
        return "<NaN>"
    if isinstance(value, tuple):
        return tuple(_nan_free(v) for v in value)
    return value


def same(a: RowChange, b: RowChange) -> bool:
    # values: the order matters too (it is the statement's column order)
    def fields(c: RowChange) -> tuple[Any, ...]:
        values = [(k, _nan_free(v)) for k, v in c.values.items()]
        return (c.table, c.op, _nan_free(c.key), values, c.commit_ts, c.columns, c.ddl)

    return fields(a) == fields(b) and a.schema_version == b.schema_version and a.shape == b.shape


def check(fast: FastMounter, value: bytes, commit_ts: int = 5) -> RowChange | None:
    got = fast.mount(value, commit_ts)
    want = ordinary(value, commit_ts)
    if got is not None:
        assert isinstance(want, RowChange), (want, got)
        assert same(got, want), (got, want)
    return got


def test_the_fast_path_reads_the_current_schema() -> None:
    # A new ChangeEvent schema changes the fingerprint: update the decoder (and this).
    assert codec.fingerprint("ChangeEvent") == CHANGE_EVENT_FINGERPRINT
    assert FastMounter(codec.fingerprint("ChangeEvent")).enabled


def test_another_schema_turns_it_off() -> None:
    fast = FastMounter(CHANGE_EVENT_FINGERPRINT ^ 1)
    assert not fast.enabled
    assert fast.mount(change_event("t", "update", COLS, {"id": 1}, {"id": 1}), 1) is None


def test_plain_changes_take_the_fast_path() -> None:
    fast = FastMounter(CHANGE_EVENT_FINGERPRINT)
    upsert = check(fast, change_event("t", "update", COLS, {"id": 7}, {"id": 7, "blob": b"x"}))
    assert upsert is not None and upsert.values == {"id": 7, "blob": b"x"}
    insert = check(fast, change_event("t", "insert", COLS, {"id": 7}, {"name": "é"}))
    assert insert is not None and list(insert.values) == ["name", "id"]  # key filled in last
    assert check(fast, change_event("t", "delete", COLS, {"id": 7})) is not None
    # the column list is remembered, and a changed one under the same version is read anew
    again = check(fast, change_event("t", "update", COLS, {"id": 8}, {"id": 8}))
    assert again is not None and again.columns is upsert.columns
    other = [("id", "long", True), ("name", "long", False)]
    changed = check(fast, change_event("t", "update", other, {"id": 8}, {"name": 3}))
    assert changed is not None and changed.columns != upsert.columns


@pytest.mark.parametrize(
    "value",
    [
        change_event("t", "ddl", COLS, {}, None, ddl="create table"),
        change_event("t", "update", COLS, {}, {"id": 7}),  # MissingKey
        change_event("t", "update", COLS, {"id": None}, {"id": 7}),
        change_event("t", "update", COLS, {"id": "7"}, {"id": 7}),  # TypeMismatch
        change_event("t", "update", COLS, {"id": 7}, {"name": 5}),
        change_event("t", "update", COLS, {"id": 7}, {"name": b"x"}),
        change_event("t", "update", COLS, {"id": 7}, {"blob": "x"}),
        change_event("t", "update", COLS, {"id": 7}, {"other": 1}),  # UnknownColumn
        change_event("t", "update", COLS, {"id": 7}, {"id": 8}),  # KeyMismatch
        change_event("t", "update", COLS, {"id": 7}, {"id": None}),  # NullValue
        change_event("t", "update", COLS, {"id": 7}, None),  # MissingValues
        change_event("", "update", COLS, {"id": 7}, {"id": 7}),  # MissingTable
        change_event("t", "update", [("id", "long", False)], {"id": 7}, {"id": 7}),
        change_event("t", "update", COLS, {"id": 7}, {"id": 7}) + b"\x00",  # trailing
        change_event("t", "update", COLS, {"id": 7}, {"id": 7})[:-3],  # truncated
        b"\xc3\x01" + b"\x00" * 8,
        b"",
    ],
)
def test_anything_else_is_left_to_the_ordinary_path(value: bytes) -> None:
    assert FastMounter(CHANGE_EVENT_FINGERPRINT).mount(value, 1) is None


names = st.sampled_from(["id", "k2", "a", "b", "é"])
kinds = st.sampled_from(["boolean", "long", "double", "string", "bytes"])
values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.binary(max_size=5),
)


@st.composite
def events(draw: Any) -> dict[str, Any]:
    cols = draw(
        st.lists(st.tuples(names, kinds, st.booleans()), max_size=4, unique_by=lambda c: c[0])
    )
    col_names = [c[0] for c in cols] + ["zz"]
    value_maps = st.dictionaries(st.sampled_from(col_names), values, max_size=4)
    wrap = lambda m: {k: ({"data": v} if isinstance(v, bytes) else v) for k, v in m.items()}  # noqa: E731
    after = draw(st.one_of(st.none(), value_maps))
    return {
        "table": draw(st.sampled_from(["t", "u", ""])),
        "op": draw(st.sampled_from(["insert", "update", "delete", "ddl"])),
        "schema_version": draw(st.integers(0, 3)),
        "columns": [
            {"name": n, "type": t, "primary_key": pk, "nullable": draw(st.booleans())}
            for n, t, pk in cols
        ],
        "key": wrap(draw(value_maps)),
        "before": draw(st.one_of(st.none(), value_maps.map(wrap))),
        "after": None if after is None else wrap(after),
        "ddl": draw(st.one_of(st.none(), st.text(max_size=3))),
    }


TYPED = {
    "boolean": st.booleans(),
    "long": st.integers(-(2**63), 2**63 - 1),
    "double": st.one_of(st.floats(allow_nan=False), st.integers(-(2**53), 2**53)),
    "string": st.text(max_size=5),
    "bytes": st.binary(max_size=5).map(lambda b: {"data": b}),
}


@st.composite
def plain_events(draw: Any) -> dict[str, Any]:
    """Mostly changes that fit (the generator above makes mostly misfits)."""
    cols = draw(st.lists(st.tuples(names, kinds), min_size=1, max_size=4, unique_by=lambda c: c[0]))
    n_key = draw(st.integers(1, len(cols)))
    columns = [
        {"name": n, "type": t, "primary_key": i < n_key, "nullable": i >= n_key}
        for i, (n, t) in enumerate(cols)
    ]
    key = {c["name"]: draw(TYPED[c["type"]]) for c in columns[:n_key]}
    after = {}
    for c in draw(st.permutations(columns)):
        if draw(st.booleans()):
            value = (
                key[c["name"]] if c["primary_key"] else draw(st.one_of(st.none(), TYPED[c["type"]]))
            )
            after[c["name"]] = value
    return {
        "table": draw(st.sampled_from(["t", "u"])),
        "op": draw(st.sampled_from(["insert", "update", "delete"])),
        "schema_version": draw(st.integers(0, 2)),
        "columns": columns,
        "key": key,
        "before": None,
        "after": None if draw(st.integers(0, 9)) == 0 else after,
        "ddl": None,
    }


ENCODER = FastChangeEvents()


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(events(), plain_events()), min_size=1, max_size=4), st.data())
def test_generated_and_corrupted_values_agree_with_the_ordinary_path(
    batch: list[dict[str, Any]], data: Any
) -> None:
    fast = FastMounter(CHANGE_EVENT_FINGERPRINT)  # one mounter: its column cache is exercised
    for event in batch:
        value = ENCODER.encode(event)
        check(fast, value)
        # a corrupted copy: one byte changed, or cut, or grown
        i = data.draw(st.integers(0, len(value) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "grow"]))
        if how == "flip":
            bad = value[:i] + bytes([data.draw(st.integers(0, 255))]) + value[i + 1 :]
        elif how == "cut":
            bad = value[:i]
        else:
            bad = value[:i] + data.draw(st.binary(min_size=1, max_size=3)) + value[i:]
        check(fast, bad)
        check(fast, value)  # and the good one again after it (the cache holds)
