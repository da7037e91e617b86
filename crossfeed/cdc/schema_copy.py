"""Schemas follow the data: the schemas that records in Confluent's wire format name by id
are in the target side's registry before the records are committed there, under the same
ids, so a consumer that fails over to the target cluster decodes what it reads with the
target side's registry alone (the source side's may be gone with its data center).

How: the registry is copied with its ids, by Apicurio Registry's own export and import
(``GET /apis/registry/v2/admin/export``, a zip of every artifact, version and content with
their global and content ids; ``POST /apis/registry/v2/admin/import``, which keeps those
ids and skips what the target already holds). A copy runs when a record names an id the
target lacks; an id is asked of the target once. The target side's registry is thereby a
copy of the source side's: it must not also assign ids of its own (a registry that takes
registrations on both sides is one shared registry, not two copies).

What the follower decides (:meth:`SchemaFollower.ensure`): every id present (asked once,
or copied now) means commit; a registry that does not answer while an id is missing
means do not commit (the caller's transaction is retried, never written without its
schema); an id the source registry does not know either is copied as it is, since there is
nothing to copy, and counted in ``unknown``.
"""

from __future__ import annotations

import logging
import urllib.error
import urllib.request
from collections.abc import Iterable

from crossfeed.cdc.connector import registry_api_root
from crossfeed.cdc.registry import RegistryUnavailable

log = logging.getLogger(__name__)

TIMEOUT_S = 10.0


class SchemaFollower:
    """Keeps the ids records name present in ``target``'s registry, copying ``source``'s
    (both Apicurio Registry: the root URL or either API's)."""

    def __init__(self, source: str, target: str, timeout_s: float = TIMEOUT_S) -> None:
        self.source = registry_api_root(source)
        self.target = registry_api_root(target)
        self.timeout_s = timeout_s
        self.present: set[int] = set()  # ids the target is known to hold
        self.unknown: set[int] = set()  # ids neither registry holds: nothing to copy
        self.copies = 0

    def ensure(self, ids: Iterable[int]) -> str | None:
        """None when every one of ``ids`` is in the target registry (copying the source's
        first if one is not); else why not, and the caller must not commit."""
        wanted = {i for i in ids if i not in self.present and i not in self.unknown}
        if not wanted:
            return None
        try:
            missing = {i for i in wanted if not self._holds(self.target, i)}
            self.present |= wanted - missing
            if not missing:
                return None
            self.copy()
            for sid in sorted(missing):
                if self._holds(self.target, sid):
                    self.present.add(sid)
                else:
                    self.unknown.add(sid)
                    log.warning(
                        "schema id %d is in neither %s nor %s: records naming it are copied "
                        "as they are",
                        sid,
                        self.source,
                        self.target,
                    )
        except RegistryUnavailable as err:
            return f"schema ids {sorted(wanted)} not known to be in {self.target}: {err}"
        return None

    def copy(self) -> None:
        """The source registry's artifacts into the target's, ids kept; RegistryUnavailable."""
        try:
            archive = self._call(self.source + "/apis/registry/v2/admin/export", None)
            self._call(self.target + "/apis/registry/v2/admin/import", archive)
        except urllib.error.HTTPError as err:  # 404: no such API there
            raise RegistryUnavailable(
                f"{err.url}: HTTP 404 (copying schemas needs Apicurio Registry 2.x on both sides)"
            ) from None
        self.copies += 1
        log.info("schemas copied from %s to %s (ids kept)", self.source, self.target)

    def _holds(self, root: str, sid: int) -> bool:
        try:
            self._call(f"{root}/apis/ccompat/v7/schemas/ids/{sid}", None)
        except urllib.error.HTTPError as err:
            if err.code == 404:
                return False
            raise RegistryUnavailable(f"{root} answered HTTP {err.code}") from None
        return True

    def _call(self, url: str, body: bytes | None) -> bytes:
        """GET ``url`` (or POST ``body`` as a zip); HTTPError 404 as it is, the rest
        RegistryUnavailable."""
        headers = {"Content-Type": "application/zip"} if body is not None else {}
        request = urllib.request.Request(url, data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
                return bytes(answer.read())
        except urllib.error.HTTPError as err:
            if err.code == 404:
                raise
            raise RegistryUnavailable(f"{url}: HTTP {err.code}") from None
        except (urllib.error.URLError, OSError) as err:
            raise RegistryUnavailable(f"{url}: no answer ({err})") from None
