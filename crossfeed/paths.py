"""Where crossfeed keeps local state: ``.crossfeed/`` in the checkout.

The local stack's data, logs and pid files, the resolved JVM classpaths and the
generated ``local.yaml`` all live there, so ``git clean`` or ``make down`` is all
it takes to start over.
"""

from __future__ import annotations

import os
from pathlib import Path


def project_root() -> Path:
    """The checkout this package runs from (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[1]
    if (here / "pyproject.toml").exists():
        return here
    return Path.cwd()


def home() -> Path:
    """``$CROSSFEED_HOME`` if set, else ``<checkout>/.crossfeed``."""
    env = os.environ.get("CROSSFEED_HOME")
    return Path(env) if env else project_root() / ".crossfeed"


def local_config() -> Path:
    """The configuration file ``crossfeed local up`` writes."""
    return home() / "local.yaml"


def lib_dir(*markers: str) -> Path:
    """Where the jars ``make setup`` resolved are listed: the home's ``lib`` when it holds
    any of ``markers`` (file names), else the checkout's ``.crossfeed/lib``.

    ``make setup`` writes the jars to the checkout; a second stack (``$CROSSFEED_HOME``
    elsewhere) has its own data but shares those jars unless it resolved its own.
    """
    own = home() / "lib"
    if any((own / marker).exists() for marker in markers):
        return own
    return project_root() / ".crossfeed" / "lib"


def classpath_file(name: str) -> Path:
    """Resolved JVM classpath written by ``make setup`` (``kafka`` or ``spark``): see
    ``lib_dir``."""
    return lib_dir(f"{name}.classpath") / f"{name}.classpath"


def port_offset() -> int:
    """``$CROSSFEED_LOCAL_PORT_OFFSET``: shifts every local-stack port, so a second stack
    (with its own ``$CROSSFEED_HOME``) can run beside the first. 0 by default."""
    return int(os.environ.get("CROSSFEED_LOCAL_PORT_OFFSET", "0"))
