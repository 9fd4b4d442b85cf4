"""Output that fits: the width a command's text may take, and long lines wrapped within it.

A terminal's own width (COLUMNS first, as systemctl reads it); 100 columns when the output is not a
terminal (a pipe, a file, a log), so what a script or a ticket gets does not depend on who ran it.
Table rows are never wrapped here (a wrapped row is no longer a row): a table fits by its own
means (render.fit_columns: short names, then fewer columns). `--plain` output is never fitted.

`FittedStream` is how every command's output fits (cli.main puts it over stdout and stderr, unless
`--wide`): each complete line written through it is wrapped as `fit_text` wraps it.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import textwrap
from typing import Sequence, TextIO

NOT_A_TERMINAL = 100
NARROWEST = 40  # below this a terminal is taken to be misreported
_TABLE_GAP = re.compile(r"\S  +\S")  # a table row: cells apart by two spaces or more


def output_width(stream: TextIO) -> int:
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) >= NARROWEST:
        return int(columns)
    try:
        if stream.isatty():
            return max(shutil.get_terminal_size().columns, NARROWEST)
    except (AttributeError, ValueError, OSError):  # a closed or replaced stream
        pass
    return NOT_A_TERMINAL


def is_table_row(line: str) -> bool:
    return bool(_TABLE_GAP.search(line.strip()))


def wrap_line(line: str, width: int) -> list[str]:
    """One line as lines within `width`, continued 4 columns further in than it starts; a word
    longer than the width (a path, a URL) stays whole."""
    if len(line) <= width or is_table_row(line):
        return [line]
    indent = line[: len(line) - len(line.lstrip(" "))]
    return textwrap.wrap(line.lstrip(" "), width, initial_indent=indent, subsequent_indent=indent + "    ",
                         break_long_words=False, break_on_hyphens=False, drop_whitespace=True) or [line]


def fit_text(text: str, width: int) -> str:
    """Every line of `text` that is not a table row wrapped within `width`."""
    lines = text.split("\n")
    return "\n".join(part for line in lines for part in wrap_line(line, width))


def widest(lines: Sequence[str]) -> int:
    return max((len(line) for line in lines), default=0)


def fitted(text: str, width: int | None) -> str:
    """`text` fitted to `width` columns (None: as it is)."""
    return text if width is None else fit_text(text, width)


class FittedStream(io.TextIOBase):
    """A text stream whose every complete line reaches `stream` fitted within `width`; a line not
    yet ended waits for its end, or for a flush (a prompt), which writes it as it is."""

    def __init__(self, stream: TextIO, width: int) -> None:
        super().__init__()
        self.stream, self.width, self.pending = stream, width, ""

    def write(self, text: str) -> int:
        self.pending += text
        if "\n" in self.pending:
            done, _, self.pending = self.pending.rpartition("\n")
            self.stream.write(fit_text(done, self.width) + "\n")
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.stream.encoding
