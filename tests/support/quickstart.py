"""The quick starts of README.md and docs/cdc.md as steps a test can run in order.

A quick start is a section of a Markdown page: its indented blocks are shell commands
(continuation lines joined, trailing ``# comments`` dropped), its fenced ``python``
blocks are programs. ``localize`` moves the local stack's well-known ports by an offset,
so a test can run the page's commands on a stack of its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PORTS = (19092, 29092, 25432, 15432, 18083)
"""dc-a, dc-b, the target PostgreSQL, the source PostgreSQL, Kafka Connect."""
_COMMENT = re.compile(r"\s+#\s.*$")


@dataclass(frozen=True)
class Step:
    kind: str  # "sh" or "python"
    text: str

    @property
    def long_lived(self) -> bool:
        """A service the reader runs in a terminal of its own."""
        return self.kind == "sh" and bool(
            re.match(r"crossfeed (coordinator|puller|sorter|sink) run\b", self.text)
        )


def section(page: str, heading: str) -> str:
    """The text under the ``## `` heading that starts with ``heading``, up to the next."""
    text = (ROOT / page).read_text()
    start = next(
        (m.end() for m in re.finditer(r"^## (.*)$", text, re.M) if m.group(1).startswith(heading)),
        None,
    )
    if start is None:
        raise LookupError(f"{page} has no section '## {heading}'")
    following = re.search(r"^## ", text[start:], re.M)
    return text[start : start + following.start()] if following else text[start:]


def steps(text: str) -> list[Step]:
    """The commands and programs of a section, in order."""
    out: list[Step] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```python"):
            end = lines.index("```", i + 1)
            out.append(Step("python", "\n".join(lines[i + 1 : end]) + "\n"))
            i = end + 1
            continue
        if line.startswith("    ") and line.strip():
            command = ""
            while i < len(lines) and lines[i].startswith("    "):
                part = _COMMENT.sub("", lines[i]).strip()
                if part.endswith("\\"):
                    command += part[:-1].rstrip() + " "
                else:
                    command += part
                    out.append(Step("sh", command))
                    command = ""
                i += 1
            continue
        i += 1
    return out


def localize(text: str, offset: int) -> str:
    """``text`` with the local stack's ports moved by ``offset``."""
    for port in PORTS:
        text = re.sub(rf"(?<=:){port}\b", str(port + offset), text)
    return text
