"""``crossfeed local up|down|status|stop|start``: the two data centers on one machine.

dc-a on 127.0.0.1:19092, dc-b on 127.0.0.1:29092 (each its own cluster id), and
PostgreSQL on 127.0.0.1:25432. ``up`` is idempotent and waits until every part
answers a real request; ``down`` leaves no process behind.

``up --cdc`` starts the capture side too: a source PostgreSQL on 127.0.0.1:15432
(``wal_level=logical``), a Kafka Connect worker writing to the plain dc-a with the
Debezium PostgreSQL connector, REST on 127.0.0.1:18083, and a schema registry (Apicurio,
127.0.0.1:18081, ``registry.py``) for Debezium in Avro.

``up --active-active`` (implies ``--cdc``) captures both sides: both PostgreSQL servers run
with ``wal_level=logical`` and ``track_commit_timestamp=on`` (a server already running
without them is restarted), and a second Connect worker with Debezium writes to dc-b
(REST 127.0.0.1:28083, log in ``.crossfeed/connect-b/``). ``crossfeed pair create`` then
joins the two databases (docs/active-active.md).

``up --secure`` runs dc-a and dc-b secured instead (SASL_SSL with SCRAM, on 19094 and
29094; ``secure.py``): its clusters are other processes with their own data, so both
pairs may run side by side. ``.crossfeed/local.yaml`` names the pair the last ``up``
started, and ``crossfeed local stop|start`` act on that one (:func:`secured`).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import yaml

from crossfeed import paths
from crossfeed.kafka import clients
from crossfeed.local import postgres, processes, secure
from crossfeed.local.connect import GROUP_ID_B, REST_PORT_B, TOPICS_B, ConnectWorker
from crossfeed.local.kafka import KafkaNode
from crossfeed.local.postgres import URI as POSTGRES_URI
from crossfeed.local.postgres import Postgres
from crossfeed.local.postgres import target as _target
from crossfeed.local.registry import Registry
from crossfeed.local.secure import SecureNode, SecureStack

_OFF = paths.port_offset()
CLUSTERS = (
    KafkaNode("dc-a", 19092 + _OFF, 19093 + _OFF),
    KafkaNode("dc-b", 29092 + _OFF, 29093 + _OFF),
)
READY_TIMEOUT_S = 180.0
"""A ceiling, not a wait: a broker or database answers within seconds on an idle machine
(and one that exits is reported at once), but two stacks starting beside a busy one on
2 cores took past 60 s."""
CONNECT_READY_TIMEOUT_S = 240.0  # a JVM loading Connect and its plugins on 2 busy cores
REGISTRY_READY_TIMEOUT_S = 120.0
REGISTRY_B_PORT = 28081 + _OFF


def connect_worker() -> ConnectWorker:
    """The capture side's Connect worker (its Kafka cluster is the plain dc-a)."""
    return ConnectWorker(CLUSTERS[0].bootstrap)


def registry() -> Registry:
    """The capture side's schema registry (Debezium in Avro)."""
    return Registry()


def registry_b() -> Registry:
    """dc-b's side's schema registry: a copy of dc-a's that a mirror feed keeps
    (schema.registry.target_url); started by :func:`up_registry_b`."""
    return Registry(REGISTRY_B_PORT, "registry-b")


def up_registry_b() -> bool:
    """Start dc-b's side's registry unless it runs; True if it was started here."""
    schemas = registry_b()
    if schemas.pid() is not None:
        return False
    schemas.start()
    _wait_registry(schemas)
    return True


def connect_worker_b() -> ConnectWorker:
    """The dc-b side's Connect worker (``--active-active``; its Kafka cluster is dc-b)."""
    return ConnectWorker(
        CLUSTERS[1].bootstrap, REST_PORT_B, "connect-b", group_id=GROUP_ID_B, topics=TOPICS_B
    )


class StackError(RuntimeError):
    """A part of the stack did not come up; the message names its log file."""


def secured() -> bool:
    """Does ``.crossfeed/local.yaml`` name the secured pair (the last ``up --secure``)?"""
    try:
        config = yaml.safe_load(paths.local_config().read_text()) or {}
        return bool(config["clusters"]["dc-a"].get("security.protocol") == "SASL_SSL")
    except (OSError, yaml.YAMLError, KeyError, TypeError, AttributeError):
        return False


def node(alias: str, secure_pair: bool = False) -> KafkaNode:
    """The cluster ``alias`` of the plain pair, or of the secured one."""
    pair: tuple[KafkaNode, ...] = SecureStack.local().nodes() if secure_pair else CLUSTERS
    for candidate in pair:
        if candidate.alias == alias:
            return candidate
    known = ", ".join(c.alias for c in pair)
    raise StackError(f"unknown local cluster {alias!r}; the local stack has {known}")


def kafka_cluster_id(bootstrap: str, timeout_s: float = 2.0) -> str | None:
    """The cluster.id a metadata request returns, or None if nothing answers."""
    return clients.cluster_id({"bootstrap.servers": bootstrap}, timeout_s)


def _client_conf(kafka: KafkaNode) -> dict[str, Any]:
    """How a client reaches ``kafka``: a secure node through its SASL_SSL listener, as
    crossfeed will (so a start that cannot log in is caught here)."""
    if isinstance(kafka, SecureNode):
        return kafka.client_properties(secure.USER)
    return {"bootstrap.servers": kafka.bootstrap}


def _wait_kafka(kafka: KafkaNode, deadline: float) -> str:
    conf = _client_conf(kafka)
    while time.monotonic() < deadline:
        if kafka.pid() is None:
            raise StackError(
                f"{kafka.alias} exited during start-up; see {kafka.log_file}:\n"
                f"{processes.tail(kafka.log_file)}"
            )
        cluster_id = clients.cluster_id(conf, 2.0)
        if cluster_id:
            return cluster_id
        time.sleep(0.5)
    raise StackError(
        f"{kafka.alias} did not answer on {conf['bootstrap.servers']} within "
        f"{READY_TIMEOUT_S:.0f}s; see {kafka.log_file}:\n{processes.tail(kafka.log_file)}"
    )


def write_local_config(*, secure_pair: bool = False) -> None:
    """``.crossfeed/local.yaml``: the aliases every later command uses with no flags;
    for the secured pair, with the password by ``${file:}`` reference."""
    if secure_pair:
        stack = SecureStack.local()
        clusters = {n.alias: stack.cluster_config(n) for n in stack.nodes()}
        what = "'crossfeed local up --secure'; dc-a and dc-b over SASL_SSL (SCRAM)"
    else:
        clusters = {c.alias: {"bootstrap.servers": c.bootstrap} for c in CLUSTERS}
        what = "'crossfeed local up'; the local stack's cluster aliases"
    config = {"clusters": clusters, "postgres": POSTGRES_URI, "control_cluster": "dc-b"}
    paths.local_config().parent.mkdir(parents=True, exist_ok=True)
    paths.local_config().write_text(
        f"# Written by {what}.\n" + yaml.safe_dump(config, sort_keys=False)
    )


def up(
    *,
    postgres: bool = True,
    secure_pair: bool = False,
    cdc: bool = False,
    active_active: bool = False,
) -> dict[str, str]:
    """Start what is not running, wait for all; returns alias -> cluster.id. With
    ``secure_pair``, dc-a and dc-b are the secured pair (``secure.py``); ``cdc``: the
    capture side too (source PostgreSQL, Connect with Debezium, on the plain dc-a);
    ``active_active``: both sides captured (implies ``cdc``; :func:`up_active_active`)."""
    cdc = cdc or active_active
    if cdc and secure_pair:
        flag = "--active-active" if active_active else "--cdc"
        raise StackError(f"{flag} runs beside the plain pair; start it without --secure")
    if active_active and not postgres:
        raise StackError("--active-active needs both PostgreSQL servers; drop --no-postgres")
    deadline = time.monotonic() + READY_TIMEOUT_S
    pair: tuple[KafkaNode, ...] = SecureStack.local().prepare() if secure_pair else CLUSTERS
    for kafka in pair:
        kafka.start()
    pg = _target(active_active)
    if postgres:
        pg.start()
    ids = {kafka.alias: _wait_kafka(kafka, deadline) for kafka in pair}
    if postgres:
        _wait_postgres(pg, deadline)
    if active_active:
        up_active_active()
    elif cdc:
        up_cdc()  # dc-a answers: Connect can make its topics
    write_local_config(secure_pair=secure_pair)
    return ids


def _wait_postgres(pg: Postgres, deadline: float) -> None:
    if not processes.wait_until(pg.answers, max(1.0, deadline - time.monotonic())):
        raise StackError(
            f"PostgreSQL did not answer SELECT 1 on 127.0.0.1:{pg.port} within "
            f"{READY_TIMEOUT_S:.0f}s; see {pg.log_file}:\n{processes.tail(pg.log_file)}"
        )
    pg.ensure_database()


def up_cdc(*, active_active: bool = False) -> list[str]:
    """Start the capture side (dc-a must answer): the source PostgreSQL, the schema registry
    and Connect with Debezium; returns what was started here (tests stop just that).
    ``active_active``:
    the source with commit timestamps (:func:`up_active_active` starts the rest)."""
    started = []
    pg = postgres.source(active_active)
    if not pg.running():
        pg.start()
        started.append(pg.name)
    _wait_postgres(pg, time.monotonic() + READY_TIMEOUT_S)
    if _settle(pg):
        started.append(f"{pg.name} (restarted)")
    schemas = registry()
    if schemas.pid() is None:
        schemas.start()  # starts while Connect loads its plugins
        started.append(schemas.name)
    worker = connect_worker()
    if worker.pid() is None:
        worker.start()
        started.append("connect")
    _wait_registry(schemas)
    _wait_connect(worker)
    return started


def _wait_registry(schemas: Registry) -> None:
    if (
        not processes.wait_until(
            lambda: schemas.pid() is None or schemas.answers(), REGISTRY_READY_TIMEOUT_S, 1.0
        )
        or not schemas.answers()
    ):
        raise StackError(
            f"the schema registry did not answer on {schemas.url} within "
            f"{REGISTRY_READY_TIMEOUT_S:.0f}s; see {schemas.log_file}:\n"
            f"{processes.tail(schemas.log_file)}"
        )


def up_active_active() -> list[str]:
    """Both sides captured (dc-a and dc-b must answer): the capture side of ``--cdc``,
    both PostgreSQL servers with ``wal_level=logical`` and ``track_commit_timestamp=on``
    (restarted if they run without), and Connect with Debezium writing to dc-b; returns
    what was started or restarted here."""
    target = postgres.target(active_active=True)
    if not target.running():
        target.start()
        _wait_postgres(target, time.monotonic() + READY_TIMEOUT_S)
    restarted = [f"{target.name} (restarted)"] if _settle(target) else []
    worker_b = connect_worker_b()
    started_b = []
    if worker_b.pid() is None:
        worker_b.start()  # loads its plugins while the dc-a side comes up
        started_b.append(worker_b.name)
    started = restarted + up_cdc(active_active=True) + started_b
    _wait_connect(worker_b)
    return started


def _settle(pg: Postgres) -> bool:
    """Restart ``pg`` if it runs without the settings it is meant to have (a data
    directory started before without ``--active-active``); True if it was restarted."""
    missing = pg.settings_missing()
    if not missing:
        return False
    pg.restart()
    _wait_postgres(pg, time.monotonic() + READY_TIMEOUT_S)
    still = pg.settings_missing()
    if still:
        wanted = ", ".join(f"{k}={v}" for k, v in pg.settings.items() if k in still)
        raise StackError(
            f"{pg.name} runs without {wanted} after a restart; see {pg.log_file}:\n"
            f"{processes.tail(pg.log_file)}"
        )
    return True


def restart_connect(*, hard: bool = True, side: str = "dc-a") -> None:
    """Kill (or stop) the Connect worker (of ``side``: dc-a or dc-b) and start it again;
    returns once it answers."""
    worker = connect_worker_b() if side == "dc-b" else connect_worker()
    worker.stop(hard=hard)
    worker.start()
    _wait_connect(worker)


def _wait_connect(worker: ConnectWorker) -> None:
    deadline = time.monotonic() + CONNECT_READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if worker.pid() is None:
            raise StackError(
                f"Kafka Connect ({worker.name}) exited during start-up; see {worker.log_file}:\n"
                f"{processes.tail(worker.log_file)}"
            )
        if worker.answers():
            return
        time.sleep(1.0)
    raise StackError(
        f"Kafka Connect did not list the Debezium connector on {worker.url} within "
        f"{CONNECT_READY_TIMEOUT_S:.0f}s; see {worker.log_file}:\n"
        f"{processes.tail(worker.log_file)}"
    )


def start(alias: str, secure_pair: bool = False) -> str:
    """Restart one stopped cluster (regaining a data center); returns its cluster.id."""
    kafka = node(alias, secure_pair)
    kafka.start()
    return _wait_kafka(kafka, time.monotonic() + READY_TIMEOUT_S)


def stop(alias: str, *, hard: bool = False, secure_pair: bool = False) -> bool:
    """Stop one cluster without touching the other (losing a data center)."""
    return node(alias, secure_pair).stop(hard=hard)


def down() -> list[str]:
    """Stop everything (both pairs); returns what was stopped.

    Connect and the registries first (they leave cleanly while the brokers answer), then
    the brokers and databases; the parts of each step stop side by side, since each
    clean shutdown is mostly waiting (one after another took ~30 s)."""
    clients_of_kafka: list[tuple[str, Any]] = [
        (part.name, part)
        for part in (connect_worker(), connect_worker_b(), registry(), registry_b())
    ]
    servers: list[tuple[str, Any]] = [
        *((k.alias, k) for k in CLUSTERS),
        *((f"{k.alias} (secure)", k) for k in SecureStack.local().nodes()),
        *((pg.name, pg) for pg in (Postgres(), postgres.source())),
    ]
    return _stop_side_by_side(clients_of_kafka) + _stop_side_by_side(servers)


def _stop_side_by_side(parts: list[tuple[str, Any]]) -> list[str]:
    """Stop ``parts`` (name, part with ``stop()``) at once; the names of those that ran."""
    with ThreadPoolExecutor(max_workers=len(parts)) as pool:
        ran = list(pool.map(lambda named: named[1].stop(), parts))
    return [name for (name, _), was_running in zip(parts, ran, strict=True) if was_running]


@dataclass(frozen=True)
class PartStatus:
    name: str
    address: str
    pid: int | None
    answering: bool
    detail: str
    log: str


def status() -> list[PartStatus]:
    """What runs where, from pid files and a real request to each part."""
    parts = []
    stack = SecureStack.local()
    # The secured pair only once it was ever started (its directory exists).
    secure_nodes = stack.nodes() if stack.base.is_dir() else ()
    for kafka in (*CLUSTERS, *secure_nodes):
        pid = kafka.pid()
        # Asked on the PLAINTEXT listener: what runs, whoever may log in.
        cluster_id = kafka_cluster_id(kafka.bootstrap, 1.0) if pid else None
        is_secure = isinstance(kafka, SecureNode)
        parts.append(
            PartStatus(
                f"{kafka.alias} (secure)" if is_secure else kafka.alias,
                kafka.secure_bootstrap if isinstance(kafka, SecureNode) else kafka.bootstrap,
                pid,
                cluster_id is not None,
                f"cluster.id {cluster_id}" if cluster_id else "",
                str(kafka.log_file),
            )
        )
    for pg in (postgres.target(active_active=True), postgres.source(active_active=True)):
        running = pg.running()
        if pg.name != "postgres" and not running and not pg.data.exists():
            continue  # the capture side was never started (crossfeed local up --cdc)
        answering = running and pg.answers()
        both_sides = answering and not pg.settings_missing()
        parts.append(
            PartStatus(
                pg.name,
                f"127.0.0.1:{pg.port}",
                pg.pid() if running else None,
                answering,
                (pg.uri + (" (active-active ready)" if both_sides else "")) if running else "",
                str(pg.log_file),
            )
        )
    for worker, writes_to in ((connect_worker(), "dc-a"), (connect_worker_b(), "dc-b")):
        pid = worker.pid()
        if pid is None and not worker.dir.exists():
            continue  # never started (--cdc, --active-active)
        answering = pid is not None and worker.answers()
        parts.append(
            PartStatus(
                worker.name,
                f"127.0.0.1:{worker.port}",
                pid,
                answering,
                f"Debezium PostgreSQL connector, writes to {writes_to}" if answering else "",
                str(worker.log_file),
            )
        )
    for schemas, side in ((registry(), "dc-a"), (registry_b(), "dc-b")):
        pid = schemas.pid()
        if pid is None and not schemas.dir.exists():
            continue  # never started
        answering = pid is not None and schemas.answers()
        parts.append(
            PartStatus(
                schemas.name,
                f"127.0.0.1:{schemas.port}",
                pid,
                answering,
                f"schema registry (Apicurio) of {side}'s side, {schemas.url}" if answering else "",
                str(schemas.log_file),
            )
        )
    return parts
