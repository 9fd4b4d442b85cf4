"""The README's samples are what the commands print in the tests that run them: each sample sits
between `<!-- sample: NAME -->` and `<!-- end of sample -->`, indented 4 columns, and `check` says
whether the command's text is the sample, ids, times and counts aside (as the Quick start's test
compares its transcript). `PHASEWATCH_WRITE_README=1` writes the text into the README instead."""

from __future__ import annotations

import os
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
END = "<!-- end of sample -->"


def normalized(text: str) -> str:
    """Without what changes from run to run: ids, times, counts, and the padding they move."""
    text = re.sub(r"[0-9a-f]{32}", "ID", text)
    text = re.sub(r"\b\d+(?:d|h|m|s)(?:\d+(?:h|m|s))*\b", "D", text)  # 25m and 25m1s alike
    return " ".join(re.sub(r"\d+", "N", text).split())


def _block(readme: str, name: str) -> tuple[int, int]:
    start = readme.index(f"<!-- sample: {name} -->\n") + len(f"<!-- sample: {name} -->\n")
    return start, readme.index(END, start)


def sample(name: str) -> str:
    readme = README.read_text()
    start, end = _block(readme, name)
    return "\n".join(line[4:] for line in readme[start:end].strip("\n").splitlines()) + "\n"


def check(name: str, text: str) -> None:
    if os.environ.get("PHASEWATCH_WRITE_README"):
        readme = README.read_text()
        start, end = _block(readme, name)
        indented = "".join(f"    {line}".rstrip() + "\n" for line in text.rstrip("\n").splitlines())
        README.write_text(readme[:start] + "\n" + indented + "\n" + readme[end:])
    assert normalized(sample(name)) == normalized(text), f"README sample {name!r} differs from what it prints:\n{text}"
