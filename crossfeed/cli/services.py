"""``crossfeed <service> run``: start one instance of a service."""

from __future__ import annotations

from typing import Optional

import typer

from crossfeed.cli.common import clean_errors, fail, settings
from crossfeed.config import Settings
from crossfeed.extras import require
from crossfeed.feeds import FeedSpec, load_feed_file
from crossfeed.state import read_feed
from crossfeed.wire import topics


def resolve_feed(config: Settings, feed: str, feed_file: str | None) -> FeedSpec:
    """The feed to run: from --feed-file, else as the coordinator stored it."""
    if feed_file:
        spec = load_feed_file(feed_file)
        if spec.name != feed:
            fail(f"--feed {feed!r} does not match the name {spec.name!r} in {feed_file}")
        return spec
    control = config.control_alias()
    stored = read_feed(config.cluster(control).client_config(), feed)
    if stored is None:
        fail(
            f"feed {feed!r} is not in {topics.STATE} on {control}: create it with "
            "'crossfeed changefeed create' or pass --feed-file FILE"
        )
    return stored


FeedOpt = typer.Option(..., "--feed", help="feed name")
FeedFileOpt = typer.Option(None, "--feed-file", help="YAML feed file (fields of changefeed create)")
InstanceOpt = typer.Option(None, "--instance", help="instance id (default: role-host-pid-random)")
PortOpt = typer.Option(None, "--metrics-port", help="port of /metrics and /status (0: any free)")


def puller_run(
    feed: str = FeedOpt,
    feed_file: Optional[str] = FeedFileOpt,  # noqa: UP045 - typer needs Optional
    instance: Optional[str] = InstanceOpt,  # noqa: UP045
    metrics_port: Optional[int] = PortOpt,  # noqa: UP045
) -> None:
    """Run one puller instance: copy source partitions into the feed's changes topic."""
    from crossfeed.services.puller.main import run

    raise typer.Exit(_run(run, feed, feed_file, instance, metrics_port))


def sink_run(
    feed: str = FeedOpt,
    feed_file: Optional[str] = FeedFileOpt,  # noqa: UP045
    instance: Optional[str] = InstanceOpt,  # noqa: UP045
    metrics_port: Optional[int] = PortOpt,  # noqa: UP045
) -> None:
    """Run one sink instance of an ordered feed: apply its sorted changes to the target."""
    from crossfeed.services.sink.main import run

    raise typer.Exit(_run(run, feed, feed_file, instance, metrics_port))


def sorter_run(
    feed: str = FeedOpt,
    feed_file: Optional[str] = FeedFileOpt,  # noqa: UP045
    instance: Optional[str] = InstanceOpt,  # noqa: UP045
    metrics_port: Optional[int] = PortOpt,  # noqa: UP045
) -> None:
    """Run the sorter of an ordered feed: commit order across partitions (Spark)."""
    clean_errors(require)("sorter", "the sorter")
    from crossfeed.services.sorter.main import run

    raise typer.Exit(_run(run, feed, feed_file, instance, metrics_port))


@clean_errors
def _run(
    run: object, feed: str, feed_file: str | None, instance: str | None, metrics_port: int | None
) -> int:
    config = settings()
    spec = resolve_feed(config, feed, feed_file)
    config.cluster(spec.source)
    if spec.sink.cluster:
        config.cluster(spec.sink.cluster)
    coordinated = feed_file is None
    return run(config, spec, instance, metrics_port, coordinated=coordinated)  # type: ignore[operator,no-any-return]
