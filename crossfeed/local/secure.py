"""Local clusters that talk only SASL_SSL with SCRAM to their clients, like real ones:
``crossfeed local up --secure``.

Certificates are made on the spot with openssl: a CA of its own and a server certificate
for ``127.0.0.1`` and ``localhost`` signed by it, as PEM files (Kafka reads them with
``ssl.keystore.type=PEM``; librdkafka trusts the CA through ``ssl.ca.location``). SCRAM
users are written into the metadata log when the storage is formatted, so they exist
before the broker first answers.

The broker keeps a PLAINTEXT listener on 127.0.0.1 for itself (inter-broker traffic and
the controller; a single node has no peer to protect that from). A client learns the
addresses of the listener it bootstrapped from, so one that starts on the SASL_SSL
listener stays on it. With ``super_users``, the node also runs Kafka's
StandardAuthorizer: those users (and the PLAINTEXT listener's ANONYMOUS) may do anything,
any other user only what an ACL grants it.

:class:`SecureStack` is the pair ``crossfeed local up --secure`` runs: dc-a and dc-b
under ``$CROSSFEED_HOME/secure`` (ports beside the plain stack's, so both can run), one
user ``crossfeed`` (a super user) whose password is generated once into a file that the
configuration refers to as ``${file:...}``.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crossfeed import paths
from crossfeed.local.kafka import KafkaNode

MECHANISM = "SCRAM-SHA-512"
USER = "crossfeed"  # the user every crossfeed process logs in as, on both clusters
# SASL_SSL client ports; the node's own PLAINTEXT listener is on the next port, its
# controller on the one after. Beside the plain stack's 19092/19093 and 29092/29093.
CLIENT_PORTS = {"dc-a": 19094, "dc-b": 29094}
CERT_DAYS = 365


@dataclass(frozen=True)
class Certs:
    """PEM files: the CA's certificate, and the server's private key plus certificate."""

    ca: Path
    server: Path


def _openssl(*args: str) -> None:
    try:
        result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise RuntimeError(
            "openssl is not installed (it makes the secured clusters' certificates): "
            "install it (apt-get install openssl) and run the command again"
        ) from None
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def make_certs(directory: Path, name: str = "crossfeed-local", days: int = 30) -> Certs:
    """A new CA and a server certificate signed by it (valid for 127.0.0.1 and
    localhost, so clients that check host names accept it), in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", str(days),
        "-subj", f"/CN={name} CA", "-keyout", str(ca_key), "-out", str(ca),
    )  # fmt: skip
    # Kafka's PEM key store wants the key as PKCS#8 ("BEGIN PRIVATE KEY"): genpkey's form.
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={name}", "-out", str(csr))
    extensions = directory / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", str(days), "-extfile", str(extensions), "-out", str(cert),
    )  # fmt: skip
    server = directory / "server.pem"
    server.write_text(key.read_text() + cert.read_text())
    server.chmod(0o600)
    return Certs(ca, server)


@dataclass(frozen=True)
class SecureNode(KafkaNode):
    """A single-node KRaft cluster whose client listener is SASL_SSL with SCRAM users."""

    secure_port: int = 0
    certs: Certs | None = None
    users: Mapping[str, str] = field(default_factory=dict)  # name -> password
    data_dir: Path | None = None  # default: $CROSSFEED_HOME/<alias>
    super_users: tuple[str, ...] = ()  # non-empty: ACLs are enforced for everyone else

    @property
    def dir(self) -> Path:
        return self.data_dir or super().dir

    @property
    def secure_bootstrap(self) -> str:
        return f"127.0.0.1:{self.secure_port}"

    def format_args(self) -> list[str]:
        return [f"--add-scram={MECHANISM}=[name={n},password={p}]" for n, p in self.users.items()]

    def server_properties(self) -> str:
        if self.certs is None:
            raise ValueError(f"{self.alias}: a secure node needs certificates (make_certs)")
        replaced = ("listeners=", "advertised.listeners=", "listener.security.protocol.map=")
        base = super().server_properties().splitlines()
        lines = [line for line in base if line and not line.startswith(replaced)]
        lines += [
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_SSL://127.0.0.1:{self.secure_port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{self.port},"
            f"SASL_SSL://127.0.0.1:{self.secure_port}",
            "listener.security.protocol.map="
            "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL",
            f"sasl.enabled.mechanisms={MECHANISM}",
            f"listener.name.sasl_ssl.{MECHANISM.lower()}.sasl.jaas.config="
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
            "ssl.keystore.type=PEM",
            f"ssl.keystore.location={self.certs.server}",
            "ssl.truststore.type=PEM",
            f"ssl.truststore.location={self.certs.ca}",
        ]
        if self.super_users:
            supers = ";".join(f"User:{name}" for name in ("ANONYMOUS", *self.super_users))
            lines += [
                "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                f"super.users={supers}",
            ]
        return "\n".join([*lines, ""])

    def client_properties(self, user: str, password: str | None = None) -> dict[str, str]:
        """librdkafka properties for ``user`` on the SASL_SSL listener."""
        if self.certs is None:
            raise ValueError(f"{self.alias}: a secure node needs certificates (make_certs)")
        return {
            "bootstrap.servers": self.secure_bootstrap,
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": MECHANISM,
            "sasl.username": user,
            "sasl.password": self.users[user] if password is None else password,
            "ssl.ca.location": str(self.certs.ca),
        }


@dataclass(frozen=True)
class SecureStack:
    """dc-a and dc-b over SASL_SSL with SCRAM (``crossfeed local up --secure``), their
    certificates, data and the ``crossfeed`` user's password under ``base``."""

    base: Path

    @classmethod
    def local(cls) -> SecureStack:
        return cls(paths.home() / "secure")

    @property
    def password_file(self) -> Path:
        return self.base / f"{USER}.password"

    @property
    def certs(self) -> Certs:
        directory = self.base / "certs"
        return Certs(directory / "ca.pem", directory / "server.pem")

    def prepare(self) -> tuple[SecureNode, SecureNode]:
        """Certificates and the password, made once (kept across restarts: the SCRAM user
        is written with the storage, the CA is what clients were told to trust)."""
        certs = self.certs
        if not (certs.ca.is_file() and certs.server.is_file()):
            make_certs(certs.ca.parent, days=CERT_DAYS)
        if not self.password_file.is_file():
            formatted = [n.alias for n in self.nodes() if (n.dir / "data").is_dir()]
            if formatted:  # its user was written with a password nobody knows now
                raise RuntimeError(
                    f"{self.password_file} is missing, but {', '.join(formatted)} already "
                    f"hold(s) the {USER} user with the password it held: delete {self.base} "
                    "to start the secured pair afresh (its data goes too)"
                )
            self.base.mkdir(parents=True, exist_ok=True)
            self.password_file.touch(mode=0o600)
            self.password_file.write_text(secrets.token_urlsafe(18) + "\n")
        return self.nodes()

    def password(self) -> str:
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            return ""  # not prepared: the nodes are only looked at (status, stop)

    def nodes(self) -> tuple[SecureNode, SecureNode]:
        offset = paths.port_offset()
        users = {USER: self.password()}
        return tuple(  # type: ignore[return-value]
            SecureNode(
                alias,
                port + 1 + offset,
                port + 2 + offset,
                secure_port=port + offset,
                certs=self.certs,
                users=users,
                data_dir=self.base / alias,
                super_users=(USER,),
            )
            for alias, port in CLIENT_PORTS.items()
        )

    def node(self, alias: str) -> SecureNode | None:
        return next((n for n in self.nodes() if n.alias == alias), None)

    def cluster_config(self, node: SecureNode) -> dict[str, Any]:
        """What ``crossfeed.yaml`` says of ``node``: the password by reference (the file
        holds it), never the password itself."""
        return {
            **node.client_properties(USER, "${file:" + str(self.password_file) + "}"),
        }
