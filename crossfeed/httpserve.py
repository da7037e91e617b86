"""Every service's small HTTP endpoint: ``/metrics`` (Prometheus), ``/status`` and
``/healthz`` (JSON from a callback), served from a daemon thread on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from crossfeed.core.secrets import masked


def serve(
    status: Callable[[], dict[str, Any]], port: int = 0, host: str = "127.0.0.1"
) -> ThreadingHTTPServer:
    """Start serving; ``server.server_address[1]`` is the port (0 picks a free one)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the stdlib names it so
            if self.path == "/metrics":
                body, ctype, code = generate_latest(), CONTENT_TYPE_LATEST, 200
            elif self.path in ("/status", "/healthz"):
                data = status()
                body = json.dumps(masked(data), default=str).encode()  # no password shown
                ctype = "application/json"
                code = 200 if self.path == "/status" or data.get("state") != "failed" else 503
            else:
                body, ctype, code = b"not found\n", "text/plain", 404
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every few seconds would drown the decision log

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="http", daemon=True).start()
    return server
