"""crossfeed/core/pair_checks.py: what makes two databases unsafe to run active-active."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossfeed.core.pair_checks import (
    ColumnFacts,
    Findings,
    KeySequence,
    ServerFacts,
    TableFacts,
    UniqueIndex,
    check_pair,
    check_server,
    check_table,
    counters_by_table,
    disjoint,
)

GOOD_SERVER = ServerFacts(
    side="dc-a",
    user="app",
    track_commit_timestamp=True,
    wal_level="logical",
    superuser=False,
    replication=True,
    origin_functions=True,
)

ACCOUNTS = TableFacts(
    schema="public",
    table="accounts",
    primary_key=("id",),
    columns=(
        ColumnFacts("id", "uuid", "gen_random_uuid()"),
        ColumnFacts("balance", "bigint"),
        ColumnFacts("owner", "text"),
    ),
)


def seq(start: int, increment: int, name: str = "s") -> KeySequence:
    return KeySequence(name, start, increment, 1, 2**63 - 1)


def serial_table(sequence: KeySequence | None, identity: bool = False) -> TableFacts:
    default = None if identity else f"nextval('{sequence.name if sequence else 's'}'::regclass)"
    return TableFacts(
        schema="public",
        table="orders",
        primary_key=("id",),
        columns=(ColumnFacts("id", "bigint", default, identity=identity, sequence=sequence),),
    )


def kinds(found: list) -> list[str]:  # type: ignore[type-arg]
    return [f.kind for f in found]


# -- servers ----------------------------------------------------------------------------


def test_a_ready_server_has_no_findings() -> None:
    assert check_server(GOOD_SERVER) == []
    superuser = replace(GOOD_SERVER, replication=False, origin_functions=False, superuser=True)
    assert check_server(superuser) == []


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"track_commit_timestamp": False}, "track_commit_timestamp = on"),
        ({"wal_level": "replica"}, "wal_level = logical"),
        ({"replication": False}, "ALTER ROLE app REPLICATION"),
        ({"origin_functions": False}, "GRANT EXECUTE ON FUNCTION pg_replication_origin_create"),
    ],
)
def test_each_missing_server_setting_is_one_refusal_saying_what_to_run(
    change: dict[str, object], words: str
) -> None:
    found = check_server(replace(GOOD_SERVER, **change))  # type: ignore[arg-type]
    assert len(found) == 1
    assert not found[0].overridable
    assert words in found[0].line()
    assert found[0].line().startswith("dc-a (app): ")
    assert "\n" not in found[0].line()


# -- one table --------------------------------------------------------------------------


def test_a_uuid_keyed_table_is_safe() -> None:
    assert check_table("dc-a", ACCOUNTS, ["balance"]) == []
    assert check_pair(ACCOUNTS, ACCOUNTS, "dc-a", "dc-b", ["balance"]) == []


def test_a_missing_table_and_a_table_without_primary_key_refuse() -> None:
    missing = check_table("dc-b", TableFacts("public", "accounts", exists=False))
    assert kinds(missing) == ["missing_table"]
    assert missing[0].line().startswith("dc-b: public.accounts: ")
    keyless = check_table("dc-a", replace(ACCOUNTS, primary_key=()))
    assert kinds(keyless) == ["no_primary_key"]
    assert not keyless[0].overridable
    assert "add a primary key" in keyless[0].line()


def test_a_unique_index_besides_the_key_is_unsafe_but_may_be_allowed() -> None:
    table = replace(
        ACCOUNTS,
        unique=(
            UniqueIndex(
                "accounts_owner_key",
                "CREATE UNIQUE INDEX accounts_owner_key ON public.accounts USING btree (owner)",
            ),
        ),
    )
    found = check_table("dc-a", table)
    assert kinds(found) == ["unique"]
    line = found[0].line()
    assert "accounts_owner_key" in line and "(owner)" in line
    assert found[0].overridable
    assert Findings(found).blocking(allow_unsafe=False) == found
    assert Findings(found).blocking(allow_unsafe=True) == []


@pytest.mark.parametrize(
    "table",
    [
        serial_table(seq(1, 1, "orders_id_seq")),
        serial_table(seq(1, 1, "orders_id_seq"), identity=True),
        serial_table(None),  # a default from nextval whose sequence was not found
    ],
)
def test_a_key_generated_on_both_sides_is_unsafe_and_says_how_to_fix_it(table: TableFacts) -> None:
    found = check_table("dc-a", table)
    assert kinds(found) == ["generated_key"]
    line = found[0].line()
    assert "gen_random_uuid()" in line and "INCREMENT BY 2" in line
    assert found[0].overridable


def test_a_sequence_stepping_by_two_is_left_to_the_pair_check() -> None:
    assert check_table("dc-a", serial_table(seq(1, 2))) == []


def test_disjoint_sequences_on_both_sides_are_safe_and_overlapping_ones_are_not() -> None:
    odd, even = serial_table(seq(1, 2, "a_seq")), serial_table(seq(2, 2, "b_seq"))
    assert check_pair(odd, even, "dc-a", "dc-b") == []
    found = check_pair(odd, serial_table(seq(3, 2, "b_seq")), "dc-a", "dc-b")
    assert kinds(found) == ["generated_key"]
    assert "a_seq and b_seq overlap" in found[0].line()
    # One side steps by one: found on that side alone.
    found = check_pair(odd, serial_table(seq(1, 1, "b_seq")), "dc-a", "dc-b")
    assert [f.where for f in found] == ["dc-b: public.orders"]


def test_a_primary_key_that_differs_between_the_sides_refuses() -> None:
    other = replace(ACCOUNTS, primary_key=("id", "owner"))
    found = check_pair(ACCOUNTS, other, "dc-a", "dc-b")
    assert kinds(found) == ["key_differs"]
    assert "(id) on dc-a, (id, owner) on dc-b" in found[0].line()
    assert not found[0].overridable


# -- counters ---------------------------------------------------------------------------


def test_a_table_the_user_does_not_own_refuses() -> None:
    found = check_table("dc-a", replace(ACCOUNTS, may_alter=False))
    assert kinds(found) == ["owner"] and not found[0].overridable
    assert "ALTER TABLE public.accounts OWNER TO" in found[0].line()


def test_counter_findings_always_refuse() -> None:
    cannot_alter = replace(ACCOUNTS, may_alter=False)
    assert kinds(check_table("dc-a", cannot_alter, ["balance"])) == ["owner", "counter"]
    assert "REPLICA IDENTITY FULL" in check_table("dc-a", cannot_alter, ["balance"])[1].line()
    # Already FULL: the counter has its old values.
    assert kinds(check_table("dc-a", replace(cannot_alter, replica_identity="f"), ["balance"])) == [
        "owner"
    ]
    text = check_table("dc-a", ACCOUNTS, ["owner"])
    assert kinds(text) == ["counter"] and "is text, not a number" in text[0].line()
    assert kinds(check_table("dc-a", ACCOUNTS, ["id"])) == ["counter", "counter"]  # uuid, key
    assert "does not exist" in check_table("dc-a", ACCOUNTS, ["nope"])[0].line()
    assert all(not f.overridable for f in check_table("dc-a", ACCOUNTS, ["owner", "nope"]))


@pytest.mark.parametrize("type_", ["numeric(12,2)", "integer", "double precision", "smallint"])
def test_numeric_types_are_counters(type_: str) -> None:
    table = replace(ACCOUNTS, columns=(ColumnFacts("id", "uuid"), ColumnFacts("balance", type_)))
    assert check_table("dc-a", table, ["balance"]) == []


def test_counters_by_table() -> None:
    assert counters_by_table(["accounts.balance", "stock.level", "accounts.balance"]) == {
        "accounts": ["balance"],
        "stock": ["level"],
    }
    for bad in ("balance", "a.b.c", ".x", "x."):
        with pytest.raises(ValueError, match=r"table\.column"):
            counters_by_table([bad])


# -- disjoint, against brute force ------------------------------------------------------

small = st.integers(min_value=-20, max_value=20)


@given(
    start_a=small,
    start_b=small,
    step_a=st.integers(1, 5),
    step_b=st.integers(1, 5),
    lo_a=st.integers(-30, 30),
    lo_b=st.integers(-30, 30),
    span_a=st.integers(0, 40),
    span_b=st.integers(0, 40),
)
def test_disjoint_sequences_never_share_a_value(
    start_a: int,
    start_b: int,
    step_a: int,
    step_b: int,
    lo_a: int,
    lo_b: int,
    span_a: int,
    span_b: int,
) -> None:
    a = KeySequence("a", start_a, step_a, lo_a, lo_a + span_a)
    b = KeySequence("b", start_b, step_b, lo_b, lo_b + span_b)

    def values(s: KeySequence) -> set[int]:
        # Every value the sequence may hand out (it may be restarted anywhere its start
        # residue allows within its range, so take the whole residue class).
        return {v for v in range(s.minimum, s.maximum + 1) if (v - s.start) % s.increment == 0}

    if disjoint(a, b):
        assert not values(a) & values(b)


def test_what_both_sides_say_of_a_table_is_one_line_naming_both() -> None:
    serial = serial_table(seq(1, 1, "public.orders_id_seq"))
    found = check_pair(serial, serial, "dc-a", "dc-b")
    assert [f.where for f in found] == ["dc-a, dc-b: public.orders"]
    assert "ALTER SEQUENCE public.orders_id_seq INCREMENT BY 2" in found[0].line()
    keyless = replace(ACCOUNTS, primary_key=())
    found = check_pair(keyless, ACCOUNTS, "dc-a", "dc-b")
    assert [f.where for f in found] == ["dc-a: public.accounts"]
