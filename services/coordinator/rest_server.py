"""Serving the REST API with uvicorn from a daemon thread.

The socket is bound here, before uvicorn starts, so a port already in use is a clear
error at start-up (and port 0 picks a free one).
"""

from __future__ import annotations

import logging
import socket
import threading

import uvicorn
from fastapi import FastAPI

log = logging.getLogger(__name__)


class RestServer:
    def __init__(
        self,
        app: FastAPI,
        host: str,
        port: int,
        tls_files: tuple[str | None, str | None] = (None, None),
    ) -> None:
        """``tls_files``: (certificate, key) PEM files to serve https; both or neither."""
        cert, key = tls_files
        if (cert is None) != (key is None):
            raise RuntimeError(
                "coordinator.tls_cert_file and coordinator.tls_key_file go together: "
                "set both to serve the REST API over https, or neither"
            )
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as err:
            self.sock.close()
            raise OSError(
                f"cannot serve the REST API on {host}:{port}: {err.strerror}; "
                "pass another --port (or set CROSSFEED_COORDINATOR__PORT)"
            ) from None
        # Listening now, not when uvicorn's thread gets to it: a client that connects
        # right after start() (the CLI, a test) waits in the backlog instead of being
        # refused while the thread is still starting up.
        self.sock.listen(128)
        self.host = host
        self.port = int(self.sock.getsockname()[1])
        self.scheme = "https" if cert else "http"
        config = uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            lifespan="off",
            ssl_certfile=cert,
            ssl_keyfile=key,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, name="rest", daemon=True
        )

    def start(self) -> RestServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=5)
        self.sock.close()

    def advertised_address(self) -> str:
        """host:port other instances and the CLI can reach this server at."""
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        if ":" in host:
            host = f"[{host}]"
        return f"{host}:{self.port}"
