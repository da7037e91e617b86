#!/usr/local/bin/python
"""Container health of a crossfeed service: GET /healthz on its metrics port.

    crossfeed-healthcheck [PORT]

PORT defaults to $CROSSFEED_METRICS_PORT (9400 in the images). Exit 0 when the service
answers 200; 1 when it answers 503 (its state is "failed"), does not answer, or times out.
Used by the images' HEALTHCHECK, compose healthchecks and Kubernetes exec probes (the
metrics endpoint listens on 127.0.0.1 inside the container).
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

DEFAULT_PORT = "9400"


def main(argv: list[str]) -> int:
    port = argv[1] if len(argv) > 1 else os.environ.get("CROSSFEED_METRICS_PORT", DEFAULT_PORT)
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=4) as response:
            return 0 if response.status == 200 else 1
    except urllib.error.HTTPError as err:
        print(f"unhealthy: {url} answered {err.code}: {err.read(500)!r}", file=sys.stderr)
    except (urllib.error.URLError, OSError) as err:
        print(f"unhealthy: {url}: {err}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
