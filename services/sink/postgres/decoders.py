"""The PostgreSQL sink's one path from a record of the sorted stream to a row change: a
:class:`Decoder`, chosen once per feed (sink.py). crossfeed's own ChangeEvents
(:class:`ChangeEventDecoder`: the fast path, fastmount.py, and where it declines, the
codec and mapping.py, which name what is wrong) or Debezium's envelopes
(:class:`DebeziumDecoder`, debezium.py); the active-active sink adds its own
(active_active.py)."""

from __future__ import annotations

from typing import Any, Protocol

from crossfeed.services.sink.postgres import mapping
from crossfeed.services.sink.postgres.debezium import DebeziumMounter
from crossfeed.services.sink.postgres.fastmount import FastMounter
from crossfeed.services.sink.postgres.mapping import Misfit, RowChange
from crossfeed.services.sink.schemas import reference
from crossfeed.wire import codec
from crossfeed.wire.codec import CodecError


class Decoder(Protocol):
    def decode(
        self, key: bytes | None, value: bytes | None, commit_ts: int, hdrs: list[Any] | None
    ) -> RowChange | None:
        """The row change of a record, None when it has nothing to apply (a tombstone,
        a message); Misfit or UnknownSchema when it does not fit."""
        ...


class ChangeEventDecoder:
    """crossfeed's ChangeEvent values: the fast path first, the ordinary one otherwise."""

    def __init__(self) -> None:
        self.fast = FastMounter(codec.fingerprint("ChangeEvent"))
        self.mounter = mapping.Mounter()

    def decode(
        self, key: bytes | None, value: bytes | None, commit_ts: int, hdrs: list[Any] | None
    ) -> RowChange:
        if not value:
            raise Misfit("NoValue", "data record without a value (not a ChangeEvent)")
        fast = self.fast.mount(value, commit_ts)
        if fast is not None:
            return fast
        try:
            event = codec.decode("ChangeEvent", value)
        except CodecError as err:
            raise Misfit("UndecodableValue", f"not a ChangeEvent: {err}") from None
        return self.mounter.mount(event, commit_ts)


class DebeziumDecoder:
    """Debezium's envelopes, mapped by the Connect schema of each event. A change kept
    by reference is mounted from its payload as it is (its schema looked up once per
    id), not joined to its schema again first."""

    def __init__(self, mounter: DebeziumMounter) -> None:
        self.mounter = mounter

    def decode(
        self, key: bytes | None, value: bytes | None, commit_ts: int, hdrs: list[Any] | None
    ) -> RowChange | None:
        return self.mounter.mount(key, value, commit_ts, reference(value, hdrs))
