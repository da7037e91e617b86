"""What Spark's offset log says of a micro-batch, read by the driver (no Spark call).

Spark writes ``<checkpoint>/spark/offsets/<batch id>`` before it runs the batch (its
write-ahead log): a version line, the batch's metadata, then one line per source — for
the Kafka source ``{"<topic>": {"<partition>": next offset}}``, where the batch ends. A
file that cannot be read gives None: the caller then does without (no quiet pause).
"""

from __future__ import annotations

import json
from pathlib import Path


def batch_end(offsets_dir: Path, batch_id: int, topic: str) -> dict[int, int] | None:
    """The next offset per partition of ``topic`` after micro-batch ``batch_id``."""
    try:
        lines = (offsets_dir / str(batch_id)).read_text().strip().splitlines()
        ends = json.loads(lines[-1])[topic]
        return {int(part): int(offset) for part, offset in ends.items()}
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None
