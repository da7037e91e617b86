"""``crossfeed pair create|status|remove`` on the real local stack with both sides captured
(``crossfeed local up --active-active``): both PostgreSQL servers, both Connect workers
with Debezium, a coordinator. Each test has a database of its own on both servers."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from crossfeed.cdc import connector
from crossfeed.cdc.connect_api import ConnectError, request
from crossfeed.cli.main import app
from crossfeed.client.rest import CoordinatorClient
from crossfeed.local import captured, postgres, stack
from tests.integration.test_coordinator_process import (
    TOKEN,
    Coordinators,
    coordinator_group,
    remove_feed_quietly,
)
from tests.support.clusters import Clusters

pytestmark = pytest.mark.integration
runner = CliRunner()

TABLES = [
    "CREATE TABLE accounts (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), "
    "balance bigint NOT NULL, owner text)",
    "CREATE TABLE users (id uuid PRIMARY KEY, email text UNIQUE)",
    "CREATE TABLE orders (id serial PRIMARY KEY, note text)",
]
HIDDEN_ON_NOTES = (
    "SELECT count(*) FROM pg_attribute WHERE attrelid = 'notes'::regclass "
    "AND attname IN ('_crossfeed_ts', '_crossfeed_side') AND NOT attisdropped"
)


@pytest.fixture(scope="module")
def coordinator(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from coordinator_group(clusters, tmp_path_factory.mktemp("pair"), 1)


class Pair:
    """A fresh database of one name on both servers, and what a pair made of it."""

    def __init__(self, group: Coordinators, connect: tuple[str, str]) -> None:
        self.group = group
        self.name = f"p{uuid.uuid4().hex[:8]}"
        self.database = f"pair_{self.name}"
        self.connect_a, self.connect_b = connect
        self.servers = (postgres.source(active_active=True), postgres.target(active_active=True))

    @property
    def uris(self) -> tuple[str, str]:
        return tuple(s.uri.rsplit("/", 1)[0] + f"/{self.database}" for s in self.servers)  # type: ignore[return-value]

    def admin(self, server: postgres.Postgres) -> str:
        return server.uri.rsplit("/", 1)[0] + "/postgres"

    def create_databases(self, statements: list[str]) -> None:
        for server, uri in zip(self.servers, self.uris, strict=True):
            with psycopg.connect(self.admin(server), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.database}"')
            with psycopg.connect(uri, autocommit=True) as conn:
                for statement in statements:
                    conn.execute(statement)

    def cli(self, *args: str) -> Any:
        leader = self.group.leader()
        return runner.invoke(
            app,
            ["--config", str(self.group.config_file), "pair", *args, "--server", leader.url],
            terminal_width=400,
        )

    def create(self, *args: str) -> Any:
        a, b = self.uris
        return self.cli(
            "create",
            self.name,
            "--a-database",
            a,
            "--b-database",
            b,
            "--connect-a",
            self.connect_a,
            "--connect-b",
            self.connect_b,
            *args,
        )

    def feeds(self) -> dict[str, dict[str, Any]]:
        with CoordinatorClient(self.group.leader().url, TOKEN) as api:
            return {f["name"]: f for f in api.list_feeds() if f["name"].startswith(self.name)}

    def drop(self) -> None:
        for feed in (f"{self.name}-a-to-b", f"{self.name}-b-to-a"):
            remove_feed_quietly(self.group, feed)
        for url, letter in ((self.connect_a, "a"), (self.connect_b, "b")):
            with contextlib.suppress(ConnectError):
                connector.remove(url, f"{self.name}-{letter}")
        slots = (f"crossfeed_{self.name}_a", f"crossfeed_{self.name}_b")
        for server in self.servers:
            with psycopg.connect(self.admin(server), autocommit=True) as conn:
                captured.drop_slots(conn, list(slots))
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')


@pytest.fixture
def pair(coordinator: Coordinators, both_sides: tuple[str, str]) -> Iterator[Pair]:
    made = Pair(coordinator, both_sides)
    try:
        yield made
    finally:
        made.drop()


def error_lines(result: Any) -> list[str]:
    return [line for line in result.output.splitlines() if line.startswith("error: ")]


def test_unsafe_tables_are_refused_one_line_each_and_nothing_is_made(pair: Pair) -> None:
    pair.create_databases(TABLES)
    result = pair.create("--table", "public.users", "--table", "public.orders")
    assert result.exit_code == 1, result.output
    lines = error_lines(result)
    assert len(lines) == 3, result.output  # the count, then one line per finding
    assert lines[0].startswith(f"error: pair {pair.name} refused: 2 finding(s)")
    [unique] = [line for line in lines if "public.users" in line]
    assert "dc-a, dc-b: public.users: unique index users_email_key" in unique
    [serial] = [line for line in lines if "public.orders" in line]
    assert "key column id is generated on both sides" in serial
    assert "gen_random_uuid()" in serial and "INCREMENT BY 2" in serial
    # Nothing was made: no feed, no connector, no hidden column.
    assert pair.feeds() == {}
    for url in (pair.connect_a, pair.connect_b):
        assert not [n for n in connector.names(url) if n.startswith(pair.name)]
    with psycopg.connect(pair.uris[0]) as conn:
        assert conn.execute(
            "SELECT count(*) FROM pg_attribute WHERE attname = '_crossfeed_ts'"
        ).fetchone() == (0,)
    # A counter that cannot be added up refuses even with --allow-unsafe.
    result = pair.create("--table", "accounts", "--counter", "accounts.owner", "--allow-unsafe")
    assert result.exit_code == 1
    assert any("counter column owner is text, not a number" in x for x in error_lines(result))


def test_create_registers_both_connectors_and_both_feeds_and_remove_names_what_is_left(
    pair: Pair,
) -> None:
    pair.create_databases([*TABLES[:1], "CREATE TABLE notes (id uuid PRIMARY KEY, body text)"])
    result = pair.create(
        "--table", "public.accounts", "--table", "notes", "--counter", "accounts.balance"
    )
    assert result.exit_code == 0, result.output
    a_to_b, b_to_a = f"{pair.name}-a-to-b", f"{pair.name}-b-to-a"
    assert f"feed {a_to_b} created" in result.output
    assert f"feed {b_to_a} created" in result.output

    # Both connectors, each on its own Connect, capturing only the pair's tables.
    for url, letter in ((pair.connect_a, "a"), (pair.connect_b, "b")):
        name = f"{pair.name}-{letter}"
        connector.wait_running(url, name, 120)
        config = request(url, "GET", f"/connectors/{name}/config")
        assert config["topic.prefix"] == name
        assert config["table.include.list"] == r"public\.accounts,public\.notes"
        assert config["publication.autocreate.mode"] == "filtered"
    # Connect-B is the worker writing to dc-b.
    assert pair.connect_b == stack.connect_worker_b().url
    for uri, letter in zip(pair.uris, "ab", strict=True):
        with psycopg.connect(uri) as conn:
            published = conn.execute(
                "SELECT tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1",
                (f"crossfeed_{pair.name}_{letter}",),
            ).fetchall()
            assert published == [("accounts",), ("notes",)]  # never crossfeed's own tables
            assert conn.execute(
                "SELECT relreplident FROM pg_class WHERE relname = 'accounts'"
            ).fetchone() == ("f",)
            assert conn.execute(HIDDEN_ON_NOTES).fetchone() == (2,)

    # Both feeds, through the coordinator like any feed.
    feeds = pair.feeds()
    assert set(feeds) == {a_to_b, b_to_a}
    assert feeds[a_to_b]["source"] == "dc-a" and feeds[b_to_a]["source"] == "dc-b"
    assert feeds[a_to_b]["sink_uri"].endswith(f"/{pair.database}?schema=public")
    assert feeds[a_to_b]["sink_uri"].startswith(pair.uris[1])
    assert feeds[b_to_a]["sink_uri"].startswith(pair.uris[0])
    config = feeds[a_to_b]["config"]
    assert (config["active_active.side"], config["active_active.target_side"]) == (
        "dc-a",
        "dc-b",
    )
    assert config["active_active.counters"] == "accounts.balance"
    assert config["input"] == "debezium" and feeds[a_to_b]["mode"] == "ordered"

    # The same command again changes nothing.
    again = pair.create(
        "--table", "public.accounts", "--table", "notes", "--counter", "accounts.balance"
    )
    assert again.exit_code == 0, again.output
    assert f"feed {a_to_b} unchanged" in again.output

    status = pair.cli(
        "status", pair.name, "--connect-a", pair.connect_a, "--connect-b", pair.connect_b
    )
    assert status.exit_code == 0, status.output
    assert f"{a_to_b}: normal" in status.output and f"{b_to_a}: normal" in status.output
    assert f"connector {pair.name}-a (dc-a): RUNNING" in status.output
    assert f"connector {pair.name}-b (dc-b): RUNNING" in status.output
    assert "findings: none" in status.output
    everything = runner.invoke(
        app,
        ["--config", str(pair.group.config_file), "status", "--server", pair.group.leader().url],
        terminal_width=300,
    )
    assert a_to_b in everything.output and b_to_a in everything.output

    removed = pair.cli(
        "remove", pair.name, "--connect-a", pair.connect_a, "--connect-b", pair.connect_b
    )
    assert removed.exit_code == 0, removed.output
    for what in (
        f"feed {a_to_b}",
        f"feed {b_to_a}",
        f"connector {pair.name}-a",
        f"connector {pair.name}-b",
    ):
        assert f"removed {what}" in removed.output
    assert pair.feeds() == {}
    assert pair.name + "-a" not in connector.names(pair.connect_a)
    assert pair.name + "-b" not in connector.names(pair.connect_b)
    left = removed.output.split("left behind:", 1)[1]
    for letter in "ab":
        slot = f"crossfeed_{pair.name}_{letter}"
        assert f"SELECT pg_drop_replication_slot('{slot}')" in left
        assert f'DROP PUBLICATION "{slot}"' in left
    assert 'ALTER TABLE "public"."notes" DROP COLUMN IF EXISTS "_crossfeed_ts"' in left
    assert "REPLICA IDENTITY DEFAULT" in left
    assert "public.crossfeed_stamp()" in left and "DROP FUNCTION" in left
    assert 'DROP TABLE "public"."crossfeed_conflicts"' in left
    gone = pair.cli("status", pair.name)
    assert gone.exit_code == 1 and "no pair named" in gone.output
    for uri in pair.uris:  # what it said stays, stays
        with psycopg.connect(uri) as conn:
            assert conn.execute(HIDDEN_ON_NOTES).fetchone() == (2,)

    # Made again (on the slots left behind), then removed with its hidden columns.
    assert pair.create("--table", "public.accounts", "--table", "notes").exit_code == 0
    removed = pair.cli(
        "remove",
        pair.name,
        "--drop-hidden",
        "--connect-a",
        pair.connect_a,
        "--connect-b",
        pair.connect_b,
    )
    assert removed.exit_code == 0, removed.output
    assert "removed dc-a" in removed.output and "hidden columns and triggers of public.notes" in (
        removed.output
    )
    for uri in pair.uris:
        with psycopg.connect(uri) as conn:
            assert conn.execute(HIDDEN_ON_NOTES).fetchone() == (0,)
            triggers = conn.execute(
                "SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'crossfeed_%'"
            ).fetchone()
            assert triggers == (0,)


def test_a_user_without_the_rights_is_refused_with_the_grants_to_run(pair: Pair) -> None:
    pair.create_databases([TABLES[0]])
    role = f"r_{pair.name}"
    grant = (
        "GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text), "
        "pg_replication_origin_oid(text), pg_replication_origin_session_setup(text), "
        "pg_replication_origin_session_reset(), "
        f"pg_replication_origin_xact_setup(pg_lsn, timestamp with time zone) TO {role}"
    )
    for server in pair.servers:
        with psycopg.connect(pair.admin(server), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {role} LOGIN NOSUPERUSER NOREPLICATION")
    try:
        as_role = [uri.replace("crossfeed@", f"{role}@", 1) for uri in pair.uris]
        args = ["--a-database", as_role[0], "--b-database", as_role[1]]
        result = pair.cli(
            "create", pair.name, *args, "--table", "accounts",
            "--connect-a", pair.connect_a, "--connect-b", pair.connect_b,
        )  # fmt: skip
        assert result.exit_code == 1, result.output
        lines = error_lines(result)
        for side in ("dc-a", "dc-b"):
            assert any(
                line.startswith(f"error: {side} ({role}): user {role} may not replicate")
                for line in lines
            ), result.output
            assert any(f"{side} ({role}): user {role} may not use replication origins" in x
                       for x in lines)  # fmt: skip
        assert any("GRANT EXECUTE ON FUNCTION pg_replication_origin_create(text)" in x
                   for x in lines)  # fmt: skip
        assert any("dc-a, dc-b: public.accounts: this user does not own the table" in x
                   for x in lines)  # fmt: skip
        # Granted what the line says (in the pair's database: functions are per database),
        # that refusal is gone and the others stay.
        for uri in pair.uris:
            with psycopg.connect(uri, autocommit=True) as conn:
                conn.execute(grant)
        again = pair.cli(
            "create", pair.name, *args, "--table", "accounts",
            "--connect-a", pair.connect_a, "--connect-b", pair.connect_b,
        )  # fmt: skip
        assert again.exit_code == 1
        assert not any("replication origins" in x for x in error_lines(again)), again.output
        assert any("may not replicate" in x for x in error_lines(again))
        assert pair.feeds() == {}
    finally:
        for server in pair.servers:
            with psycopg.connect(pair.admin(server), autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{pair.database}" WITH (FORCE)')
                conn.execute(f"DROP OWNED BY {role}")
                conn.execute(f"DROP ROLE {role}")
