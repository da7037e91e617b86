"""``crossfeed coordinator run``: one coordinator instance (leader or standby)."""

from __future__ import annotations

from crossfeed import service
from crossfeed.config import Settings
from crossfeed.services.coordinator import exposure
from crossfeed.services.coordinator.coordinator import Coordinator


def run(
    settings: Settings,
    instance: str | None = None,
    host: str | None = None,
    port: int | None = None,
    metrics_port: int | None = None,
    insecure: bool = False,
) -> int:
    """Run until SIGTERM/SIGINT; returns the exit code. RuntimeError if the REST API may
    not listen where asked (see exposure.py)."""
    problem = exposure.refusal(host or settings.coordinator.host, settings.api_token, insecure)
    if problem:
        raise RuntimeError(problem)
    instance_id = service.instance_id("coordinator", instance)

    def make() -> Coordinator:
        return Coordinator(
            settings,
            instance_id,
            host or settings.coordinator.host,
            settings.coordinator.port if port is None else port,
        )

    return service.run(settings, make, metrics_port, service.Who("coordinator", instance_id))
