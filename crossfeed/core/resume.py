"""Where a mirror task resumes a source partition: its marks, checked against the target.

A mirror task's transaction writes its copies into the target partitions and its marks
(``next_offset`` per source partition) into its changes partition, so the marks say how
far the copies got — as long as the transaction is atomic on every partition it touched.
It was not, once, on the local single-broker clusters: after dc-b was killed in the
middle of a commit, the marks of a transaction were committed while its copies in one
target partition were aborted later with the next transaction's (the transaction
coordinator came back without that partition's commit), and the task resumed past 80
records that no reader ever saw. The opposite split — copies committed, marks not —
copies a transaction twice.

So the copies themselves are the truth where they say more than the marks: the newest
committed copy of the source partition in the target, and the copies there that no
read_committed reader sees (aborted). :func:`resume_offset` decides from those; the I/O
(reading the target's tail) is ``crossfeed/positions.py``'s.
"""

from __future__ import annotations

from collections.abc import Iterable


def resume_offset(marked: int, committed_copy: int | None, aborted_copies: Iterable[int]) -> int:
    """The next source offset to copy.

    ``marked``: the newest mark's ``next_offset``. ``committed_copy``: the source offset
    of the newest committed copy of this source partition in the target's tail (None:
    none there). ``aborted_copies``: source offsets of this partition's copies in that
    tail that were aborted.

    * a committed copy at or past the marks: resume after it (never copy twice);
    * aborted copies below the marks and after the newest committed copy: their
      transaction's marks committed without them — resume at the first of them;
    * otherwise the marks (records below them that have no copy at all were not to be
      copied: filtered, dead letters, loops, aborted or compacted on the source).
    """
    after = -1 if committed_copy is None else committed_copy + 1
    if after > marked:
        return after
    lost = [offset for offset in aborted_copies if after <= offset < marked]
    return min(lost) if lost else marked
