"""The project's own PostgreSQL instances (initdb + pg_ctl from Debian's packages): the
target database on the dc-b side, and with ``crossfeed local up --cdc`` a source database
on the dc-a side (``wal_level=logical``) that Debezium captures. With ``--active-active``
both run with ``wal_level=logical`` and ``track_commit_timestamp=on`` (each is captured,
and last writer wins compares commit times): :data:`ACTIVE_ACTIVE_SETTINGS`."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
from pathlib import Path

from crossfeed import paths

PORT = 25432 + paths.port_offset()
SOURCE_PORT = 15432 + paths.port_offset()
USER = "crossfeed"
DATABASE = "crossfeed"
URI = f"postgresql://{USER}@127.0.0.1:{PORT}/{DATABASE}"
SOURCE_URI = f"postgresql://{USER}@127.0.0.1:{SOURCE_PORT}/{DATABASE}"
LOGICAL_SETTINGS = {
    "wal_level": "logical",
    # Debezium's slots, and the replication origins of active-active sinks (one state each)
    "max_replication_slots": "32",
    "max_wal_senders": "10",
    # an active-active pair compares a row's last write by its commit time
    "track_commit_timestamp": "on",
}
"""A server Debezium reads through a replication slot (pgoutput)."""
ACTIVE_ACTIVE_SETTINGS = dict(LOGICAL_SETTINGS)
"""Both servers of an active-active pair: captured, and an application write's time is
``pg_xact_commit_timestamp(xmin)`` (both need a server restart to change)."""


def _bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not candidates:
        raise FileNotFoundError(
            f"{name} not found: install Debian's postgresql package ('make setup' does)"
        )
    return candidates[-1]


def _run_as() -> list[str]:
    # PostgreSQL refuses to run as root; run its tools as the 'postgres' system user then.
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise RuntimeError(
            "running as root and there is no 'postgres' user to run PostgreSQL as; "
            "install Debian's postgresql package"
        ) from None
    return ["runuser", "-u", "postgres", "--"]


class Postgres:
    """Data under ``.crossfeed/<name>``, on 127.0.0.1:<port> only. The target instance is
    ``Postgres()``; the capture side's source is :func:`source` (logical decoding on)."""

    def __init__(
        self,
        name: str = "postgres",
        port: int = PORT,
        logical: bool = False,
        commit_ts: bool = False,
    ) -> None:
        self.name = name
        self.port = port
        self.logical = logical or commit_ts
        self.commit_ts = commit_ts

    @property
    def settings(self) -> dict[str, str]:
        """The server settings this instance starts with (``-c`` options) beyond the
        defaults every instance has."""
        if self.commit_ts:
            return dict(ACTIVE_ACTIVE_SETTINGS)
        return dict(LOGICAL_SETTINGS) if self.logical else {}

    @property
    def uri(self) -> str:
        return self.database_uri(DATABASE)

    def database_uri(self, database: str) -> str:
        """The URI of ``database`` on this server (``postgres``: the admin database)."""
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, database: str) -> str:
        """A new, empty ``database`` on this server; its URI."""
        import psycopg

        with psycopg.connect(self.database_uri("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{database}"')
        return self.database_uri(database)

    @property
    def dir(self) -> Path:
        return paths.home() / self.name

    @property
    def data(self) -> Path:
        return self.dir / "data"

    @property
    def log_file(self) -> Path:
        return self.dir / "postgres.log"

    def _own(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, "postgres")
            for root, dirs, files in os.walk(self.dir):
                for name in dirs + files:
                    shutil.chown(os.path.join(root, name), "postgres")

    def prepare(self) -> None:
        if (self.data / "PG_VERSION").exists():
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        self._own()
        subprocess.run(
            [
                *_run_as(),
                _bin("initdb"),
                "-D",
                str(self.data),
                "-U",
                USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--no-sync",
            ],
            check=True,
            capture_output=True,
        )

    def pid(self) -> int | None:
        """The postmaster's process id while the server runs (its backends are children)."""
        try:
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def running(self) -> bool:
        if not (self.data / "postmaster.pid").exists():
            return False
        result = subprocess.run(
            [*_run_as(), _bin("pg_ctl"), "status", "-D", str(self.data)],
            capture_output=True,
            check=False,
        )
        return result.returncode == 0

    def start(self) -> None:
        if self.running():
            return
        self.prepare()
        self.log_file.touch()
        self._own()
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} "
            "-c fsync=off -c max_connections=100"
        )
        # Debezium reads the log through a replication slot (pgoutput); a benchmark
        # compares with PostgreSQL's own logical replication, which needs the same.
        options += "".join(f" -c {key}={value}" for key, value in self.settings.items())
        subprocess.run(
            [
                *_run_as(),
                _bin("pg_ctl"),
                "start",
                "-D",
                str(self.data),
                "-l",
                str(self.log_file),
                "-o",
                options,
                "-W",  # do not wait here; the stack waits with a real query
            ],
            check=True,
            capture_output=True,
        )

    def settings_missing(self) -> dict[str, str]:
        """The settings of :attr:`settings` the running server does not have (name -> what
        it has); a server started before with other options (needs a restart)."""
        import psycopg

        wanted = {k: v for k, v in self.settings.items() if not k.startswith("max_")}
        if not wanted:
            return {}
        found: dict[str, str] = {}
        with psycopg.connect(
            f"postgresql://{USER}@127.0.0.1:{self.port}/postgres", connect_timeout=5
        ) as conn:
            for key in wanted:
                row = conn.execute("SELECT current_setting(%s)", (key,)).fetchone()
                found[key] = str(row[0]) if row else ""
        return {k: found[k] for k, v in wanted.items() if found[k] != v}

    def restart(self) -> None:
        """Stop (fast) and start again with this instance's settings (no wait)."""
        self.stop()
        self.start()

    def ensure_database(self) -> None:
        import psycopg

        with psycopg.connect(self.database_uri("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
            ).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def answers(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.database_uri("postgres"), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def stop(self, *, hard: bool = False) -> bool:
        """Stop the server (``hard``: ``-m immediate``, as if it crashed: every process
        quits at once, nothing is checkpointed, the next start recovers from the WAL)."""
        if not self.running():
            return False
        mode = "immediate" if hard else "fast"
        subprocess.run(
            [*_run_as(), _bin("pg_ctl"), "stop", "-D", str(self.data), "-m", mode, "-w"],
            check=False,
            capture_output=True,
        )
        return True


def source(active_active: bool = False) -> Postgres:
    """The dc-a side's database that Debezium captures (``crossfeed local up --cdc``);
    ``active_active``: with commit timestamps too (``--active-active``)."""
    return Postgres("postgres-a", SOURCE_PORT, logical=True, commit_ts=active_active)


def target(active_active: bool = False) -> Postgres:
    """The dc-b side's database; ``active_active``: captured too, with commit timestamps."""
    return Postgres(commit_ts=active_active)
