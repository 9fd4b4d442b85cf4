"""The demo writes what it captures into build/demo/, never over a tracked file."""

from __future__ import annotations

import ast
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "tools" / "demo.py"


def test_every_file_the_demo_writes_is_under_build() -> None:
    tree = ast.parse(DEMO.read_text())
    assert "OUT = REPO / \"build\" / \"demo\"" in DEMO.read_text()
    writes = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("write_text", "write_bytes", "open")]
    assert writes
    for call in writes:
        target = ast.unparse(call.func.value)
        assert target.startswith("OUT /"), target
    # report --plot writes the SVG: into OUT too.
    assert "plot = OUT / " in DEMO.read_text() and "REPO / \"docs\"" not in DEMO.read_text()
