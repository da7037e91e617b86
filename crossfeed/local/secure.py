"""A local cluster that talks only SASL_SSL with SCRAM to its clients, like a real one.

Certificates are made on the spot with openssl: a CA of its own and a server certificate
for ``127.0.0.1`` and ``localhost`` signed by it, as PEM files (Kafka reads them with
``ssl.keystore.type=PEM``; librdkafka trusts the CA through ``ssl.ca.location``). SCRAM
users are written into the metadata log when the storage is formatted, so they exist
before the broker first answers.

The broker keeps a PLAINTEXT listener for itself (inter-broker traffic and the
controller; a single node has no peer to protect that from). A client learns the
addresses of the listener it bootstrapped from, so one that starts on the SASL_SSL
listener stays on it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from crossfeed.local.kafka import KafkaNode

MECHANISM = "SCRAM-SHA-512"


@dataclass(frozen=True)
class Certs:
    """PEM files: the CA's certificate, and the server's private key plus certificate."""

    ca: Path
    server: Path


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def make_certs(directory: Path, name: str = "crossfeed-local") -> Certs:
    """A new CA and a server certificate signed by it (valid for 127.0.0.1 and
    localhost, so clients that check host names accept it), in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca = directory / "ca.key", directory / "ca.pem"
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
        "-subj", f"/CN={name} CA", "-keyout", str(ca_key), "-out", str(ca),
    )  # fmt: skip
    # Kafka's PEM key store wants the key as PKCS#8 ("BEGIN PRIVATE KEY"): genpkey's form.
    _openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(key))
    _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={name}", "-out", str(csr))
    extensions = directory / "server.ext"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl(
        "x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
        "-CAcreateserial", "-days", "30", "-extfile", str(extensions), "-out", str(cert),
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
            "",
        ]
        return "\n".join(lines)

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
