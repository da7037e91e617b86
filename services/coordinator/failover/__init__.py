"""Consumer failover in the coordinator (docs/design.md: guarantee 5, failover and failback).

What the coordinator wires, once:

    from crossfeed.services.coordinator.failover import FailoverHooks, TranslatorLoop, make_router

    loop = TranslatorLoop(settings)            # at start
    app.include_router(make_router(FailoverHooks(
        settings,
        find_feed=...,            # name -> FeedSpec of a stored feed (not removed), else None
        mark_failed_over=...,     # name -> set status failed_over (leader, fenced write)
        create_feed=...,          # FeedSpec -> store it (the reverse feed of a failback)
        translator=loop.translator,
        take_translator=loop.take,
        leader_only=...,          # request -> None on the leader, else a 503 response
        dependencies=[Depends(authorized)],
    )))
    loop.sync(running_mirror_feeds)   # every leader tick (cheap, never blocks)
    loop.sync([])                     # on losing leadership; loop.stop() at shutdown

Modules: ``loop`` (the translators), ``failover`` and ``failback`` (the procedures),
``replay`` (copying extra data), ``reverse`` (the reverse feed), ``api`` (the routes).
"""

from crossfeed.services.coordinator.failover.api import make_router
from crossfeed.services.coordinator.failover.hooks import FailoverHooks
from crossfeed.services.coordinator.failover.loop import TranslatorLoop, translatable

__all__ = ["FailoverHooks", "TranslatorLoop", "make_router", "translatable"]
