"""A tiny terminal: the lines left on screen after some output, for the few control
sequences rich's live display writes (cursor up/down, erase line, carriage return)."""

from __future__ import annotations

import re

_CSI = re.compile(r"\x1b\[(\??)(\d*)([A-Za-z])")


def screen(text: str) -> list[str]:
    lines = [""]
    row = col = 0
    i = 0
    while i < len(text):
        control = _CSI.match(text, i)
        if control:
            private, count, command = control.groups()
            n = int(count or 1)
            if not private and command == "A":
                row = max(0, row - n)
            elif not private and command == "B":
                row += n
            elif command == "K":
                lines[row] = "" if count == "2" else lines[row][:col]
            elif command == "G":
                col = n - 1
            i = control.end()  # SGR (colours) and cursor show/hide change nothing here
            continue
        char = text[i]
        if char == "\n":
            row, col = row + 1, 0
        elif char == "\r":
            col = 0
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + char + line[col + 1 :]
            col += 1
        while len(lines) <= row:
            lines.append("")
        i += 1
    return [line.rstrip() for line in lines]
