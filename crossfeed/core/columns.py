"""The hidden columns crossfeed adds to the tables it writes, named once.

``_crossfeed_commit_ts``: on a table an ordered feed's PostgreSQL sink writes, the
commit_ts of the change that last wrote the row (last writer wins). ``_crossfeed_ts`` and
``_crossfeed_side``: on an active-active pair's tables, when and on which side the row was
last written (crossfeed/pair/sql.py). None of them is the application's: they are not
replicated, compared or carried over."""

from __future__ import annotations

from typing import Final

COMMIT_TS_COLUMN: Final = "_crossfeed_commit_ts"
TS_COLUMN: Final = "_crossfeed_ts"
SIDE_COLUMN: Final = "_crossfeed_side"
PAIR_COLUMNS: Final = (TS_COLUMN, SIDE_COLUMN)
HIDDEN_COLUMNS: Final = frozenset((COMMIT_TS_COLUMN, *PAIR_COLUMNS))
