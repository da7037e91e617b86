"""Unit and property tests of the PostgreSQL sink's pure parts: the mounter, the fit of a
change to its table, the SQL, and per-row merging of a batch."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crossfeed.services.sink.postgres.batch import Batch
from crossfeed.services.sink.postgres.mapping import (
    COMMIT_TS_COLUMN,
    PG_TYPES,
    Column,
    Misfit,
    Mounter,
    RowChange,
    TableSchema,
    column_arrays,
    create_table,
    delete,
    delete_many,
    ident,
    mount,
    plan,
    upsert,
    upsert_many,
)
from crossfeed.wire import codec
from tests.support.sorted_stream import change_event

pytestmark = pytest.mark.unit

COLS = [("id", "long", True), ("name", "string", False), ("blob", "bytes", False)]


def event(op: str = "update", key: Any = None, after: Any = "default", cols=COLS, **kw) -> dict:
    key = {"id": 7} if key is None else key
    if after == "default":
        after = {"id": 7, "name": "x", "blob": b"\x00\x01"}
    return codec.decode("ChangeEvent", change_event("t", op, cols, key, after, **kw))


class TestMount:
    def test_update_is_an_upsert_with_bytes_unwrapped(self) -> None:
        change = mount(event(), 55)
        assert (change.op, change.key, change.commit_ts) == ("upsert", (7,), 55)
        assert change.values == {"id": 7, "name": "x", "blob": b"\x00\x01"}
        assert change.key_columns == ("id",)

    def test_delete_needs_only_the_key(self) -> None:
        change = mount(event("delete", after=None), 1)
        assert (change.op, change.key, dict(change.values)) == ("delete", (7,), {})

    def test_key_column_filled_from_the_key(self) -> None:
        change = mount(event(after={"name": "y"}), 1)
        assert change.values == {"name": "y", "id": 7}

    def test_column_lists_are_remembered_per_schema_version(self) -> None:
        mounter = Mounter()
        first = mounter.mount(event(), 1)
        assert mounter.mount(event(), 2).columns is first.columns
        other = event(cols=[("id", "long", True), ("name", "long", False)], after={"id": 7})
        assert mounter.mount(other, 3).columns != first.columns  # same version, new list

    def test_ddl(self) -> None:
        change = mount(event("ddl", key={}, after=None, ddl="create table"), 1)
        assert change.op == "ddl" and change.ddl == "create table" and len(change.columns) == 3

    @pytest.mark.parametrize(
        ("kwargs", "error_class"),
        [
            ({"key": {}}, "MissingKey"),
            ({"key": {"id": None}}, "MissingKey"),
            ({"key": {"id": "7"}}, "TypeMismatch"),
            ({"after": {"id": 7, "name": 5}}, "TypeMismatch"),
            ({"after": {"id": 7, "name": True}}, "TypeMismatch"),
            ({"after": {"id": 7, "other": 1}}, "UnknownColumn"),
            ({"after": {"id": 8}}, "KeyMismatch"),
            ({"after": {"id": None}}, "NullValue"),
            ({"after": None}, "MissingValues"),
            ({"cols": [("id", "long", False)], "after": {"id": 7}}, "MissingKey"),
        ],
    )
    def test_misfits(self, kwargs: dict, error_class: str) -> None:
        with pytest.raises(Misfit) as err:
            mount(event(**kwargs), 1)
        assert err.value.error_class == error_class
        assert "table t" in str(err.value)

    def test_bool_is_not_a_long_but_a_long_is_a_double(self) -> None:
        cols = [("id", "long", True), ("d", "double", False), ("b", "boolean", False)]
        assert mount(event(cols=cols, after={"id": 7, "d": 3, "b": False}), 1).values["d"] == 3
        with pytest.raises(Misfit):
            mount(event(cols=cols, after={"id": 7, "d": 1.0, "b": 1}), 1)


def change(table="t", key=(1,), values=None, op="upsert", ts=10, cols=None) -> RowChange:
    columns = cols or (Column("id", "long", True), Column("name", "string"))
    if values is None:
        values = {"id": key[0], "name": "n"} if op == "upsert" else {}
    return RowChange(table, op, key, values, ts, columns)


class TestPlan:
    table = TableSchema({"id": "bigint", "name": "text", COMMIT_TS_COLUMN: "bigint"}, ("id",))

    def test_fits(self) -> None:
        assert plan("s", self.table, change(), auto_create=False).statements == ()

    def test_absent_table(self) -> None:
        created = plan("s", None, change(), auto_create=True)
        assert created.create and created.statements[0].startswith(
            'CREATE TABLE IF NOT EXISTS "s"."t"'
        )
        with pytest.raises(Misfit) as err:
            plan("s", None, change(), auto_create=False)
        assert err.value.error_class == "UnknownTable"

    def test_ddl_creates_even_without_auto_create(self) -> None:
        ddl = change(op="ddl", key=(), values={})
        assert plan("s", None, ddl, auto_create=False).create

    def test_type_mismatch(self) -> None:
        cols = (Column("id", "long", True), Column("name", "long"))
        with pytest.raises(Misfit) as err:
            plan("s", self.table, change(values={"id": 1, "name": 2}, cols=cols), True)
        assert err.value.error_class == "TypeMismatch" and "is text" in str(err.value)

    def test_key_mismatch(self) -> None:
        cols = (Column("id", "long"), Column("name", "string", True))
        with pytest.raises(Misfit) as err:
            plan("s", self.table, change(key=("n",), cols=cols), True)
        assert err.value.error_class == "KeyMismatch"

    def test_new_column_added_or_refused(self) -> None:
        cols = (Column("id", "long", True), Column("name", "string"), Column("n", "double"))
        c = change(values={"id": 1, "n": 2.0}, cols=cols)
        assert plan("s", self.table, c, True).statements == (
            'ALTER TABLE "s"."t" ADD COLUMN IF NOT EXISTS "n" double precision',
        )
        with pytest.raises(Misfit) as err:
            plan("s", self.table, c, False)
        assert err.value.error_class == "UnknownColumn"

    def test_commit_ts_column_added_to_a_user_table(self) -> None:
        user = TableSchema({"id": "bigint", "name": "text"}, ("id",))
        statements = plan("s", user, change(), auto_create=False).statements
        assert statements == (
            'ALTER TABLE "s"."t" ADD COLUMN IF NOT EXISTS "_crossfeed_commit_ts" bigint NOT NULL '
            "DEFAULT 0",
        )


class TestSql:
    def test_every_column_type_a_mounter_gives_has_a_postgresql_type(self) -> None:
        # ChangeEvent's Avro types (mapping._type_name), then Debezium's Connect types.
        from crossfeed.services.sink.postgres import debezium

        avro = {"boolean", "long", "double", "string", "bytes"}
        connect = {kind for kind, _ in [*debezium._LOGICAL.values(), *debezium._PRIMITIVE.values()]}
        assert avro | connect | {"numeric"} == set(PG_TYPES)
        # Each is a name PostgreSQL's format_type gives (compared with the catalogue when
        # a column is added: tests/integration/test_postgres_sink.py, test_cdc.py).
        assert all(name and name == name.lower() for name in PG_TYPES.values())

    def test_ident_quotes(self) -> None:
        assert ident('we"ird') == '"we""ird"'
        with pytest.raises(Misfit):
            ident("a\x00b")

    def test_create_table(self) -> None:
        cols = [
            Column("id", "long", True),
            Column("b", "bytes", nullable=False),
            Column("x", "boolean"),
        ]
        assert create_table("s", "t", cols) == (
            'CREATE TABLE IF NOT EXISTS "s"."t" ("id" bigint NOT NULL, "b" bytea NOT NULL, '
            '"x" boolean, "_crossfeed_commit_ts" bigint NOT NULL DEFAULT 0, PRIMARY KEY ("id"))'
        )

    def test_upsert_is_last_writer_wins(self) -> None:
        assert upsert("s", "t", ["id", "v"], ["id"]) == (
            'INSERT INTO "s"."t" ("id", "v", "_crossfeed_commit_ts") VALUES (%s, %s, %s) '
            'ON CONFLICT ("id") DO UPDATE SET "v" = EXCLUDED."v", '
            '"_crossfeed_commit_ts" = EXCLUDED."_crossfeed_commit_ts" '
            'WHERE "s"."t"."_crossfeed_commit_ts" <= EXCLUDED."_crossfeed_commit_ts"'
        )

    def test_delete(self) -> None:
        assert delete("s", "t", ["a", "b"]) == (
            'DELETE FROM "s"."t" WHERE "a" = %s AND "b" = %s AND "_crossfeed_commit_ts" <= %s'
        )

    def test_upsert_many_takes_one_array_per_column(self) -> None:
        assert upsert_many("s", "t", ["id", "v"], ["long", "double"], ["id"]) == (
            'INSERT INTO "s"."t" ("id", "v", "_crossfeed_commit_ts") SELECT * FROM '
            "unnest(%b::bigint[], %b::double precision[], %b::bigint[]) "
            'ON CONFLICT ("id") DO UPDATE SET "v" = EXCLUDED."v", '
            '"_crossfeed_commit_ts" = EXCLUDED."_crossfeed_commit_ts" '
            'WHERE "s"."t"."_crossfeed_commit_ts" <= EXCLUDED."_crossfeed_commit_ts"'
        )

    def test_delete_many(self) -> None:
        assert delete_many("s", "t", ["a", "b"], ["string", "bytes"]) == (
            'DELETE FROM "s"."t" AS _cf_t USING unnest(%b::text[], %b::bytea[], %b::bigint[]) '
            'AS _cf_d(k0, k1, ts) WHERE _cf_t."a" = _cf_d.k0 AND _cf_t."b" = _cf_d.k1 '
            'AND _cf_t."_crossfeed_commit_ts" <= _cf_d.ts'
        )

    def test_column_arrays(self) -> None:
        rows = [(1, 2, "a"), (3, 4.5, None)]
        assert column_arrays(rows, ["long", "double", "string"], [7, 8]) == [
            [1, 3],
            [2.0, 4.5],  # a double column's ints as floats: psycopg refuses mixed lists
            ["a", None],
            [7, 8],
        ]
        assert column_arrays([], ["long"], []) == [[], []]


class TestBatch:
    def test_last_change_of_a_row_wins(self) -> None:
        batch = Batch()
        assert batch.add(change(key=(1,), values={"id": 1, "name": "a"}, ts=1))
        assert batch.add(change(key=(2,), ts=1))
        assert batch.add(change(key=(1,), values={"id": 1, "name": "b"}, ts=2))
        assert batch.add(change(key=(2,), op="delete", ts=3))
        assert len(batch) == 2 and batch.changes == 4
        out = {c.key: c for c in batch.all()}
        assert out[(1,)].values["name"] == "b" and out[(2,)].op == "delete"

    def test_fewer_columns_do_not_merge(self) -> None:
        batch = Batch()
        assert batch.add(change(values={"id": 1, "name": "a"}))
        assert not batch.add(change(values={"id": 1}))
        assert batch.add(change(key=(3,), values={"id": 3}))
        assert batch.add(change(key=(3,), values={"id": 3, "name": "z"}))

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.tuples(st.integers(0, 3), st.sampled_from(["full", "id", "delete"])),
            max_size=12,
        ),
        st.lists(
            st.tuples(st.integers(0, 3), st.sampled_from(["full", "id", "delete"])),
            max_size=12,
        ),
    )
    def test_add_many_is_add_one_by_one(self, held, incoming) -> None:
        """add_many, writing whenever it stops (as the sink does), holds and writes the
        same as adding the changes one by one."""

        def make(k: int, how: str) -> RowChange:
            values = {"id": k, "name": "n"} if how == "full" else {"id": k}
            return change(key=(k,), values=values, op="delete" if how == "delete" else "upsert")

        def state(batch: Batch) -> list:
            rows = [(c.key, c.op, list(c.values)) for c in batch.all()]
            return [len(batch), batch.changes, *rows]

        def run(many: bool) -> tuple[list, list]:
            done, written = Batch(), []
            for k, how in held:
                if not done.add(make(k, how)):
                    written.append(state(done))
                    done.clear()
                    done.add(make(k, how))
            changes = [make(k, how) for k, how in incoming]
            if many:
                at = done.add_many(changes, 0)
                while at < len(changes):
                    written.append(state(done))
                    done.clear()
                    at = done.add_many(changes, at)
            else:
                for c in changes:
                    if not done.add(c):
                        written.append(state(done))
                        done.clear()
                        done.add(c)
            return written, state(done)

        assert run(True) == run(False)

    def test_groups_by_shape(self) -> None:
        batch = Batch()
        batch.add(change(key=(1,)))
        batch.add(change(key=(2,)))
        batch.add(change(key=(3,), op="delete"))
        batch.add(change(table="u", key=(1,)))
        shapes = {(t, s): len(cs) for t, s, cs in batch.groups()}
        assert shapes == {
            ("t", ("upsert", ("id", "name"))): 2,
            ("t", ("delete", ())): 1,
            ("u", ("upsert", ("id", "name"))): 1,
        }


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 5), st.sampled_from(["upsert", "delete"]), st.integers(0, 9)),
        max_size=60,
    )
)
def test_merged_batch_leaves_the_same_rows_as_one_by_one(ops) -> None:
    """Applying the merged batch to a table equals applying every change in order
    (full-row upserts and deletes; last writer wins on commit_ts, which only grows)."""

    def apply(rows: dict, c: RowChange) -> None:
        stored = rows.get(c.key)
        if stored is not None and stored[1] > c.commit_ts:
            return
        if c.op == "delete":
            rows.pop(c.key, None)
        else:
            rows[c.key] = (c.values["name"], c.commit_ts)

    one_by_one: dict = {}
    merged: dict = {}
    batch = Batch()
    for ts, (k, op, v) in enumerate(ops):
        c = change(
            key=(k,), op=op, values={"id": k, "name": str(v)} if op == "upsert" else {}, ts=ts
        )
        apply(one_by_one, c)
        assert batch.add(c)
    for c in batch.all():
        apply(merged, c)
    assert merged == one_by_one
