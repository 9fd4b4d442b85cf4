"""The README's picture of `phasewatch report --plot`: docs/images/report-example.svg is what the code
draws now (tools/report_example.py), and docs/images/report-example.png beside it is that SVG
rendered (rsvg-convert, apt librsvg2-bin)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_readme_shows_the_png_of_the_svg_the_code_draws_now(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    assert "docs/images/report-example.png" in readme and "docs/images/report-example.svg" in readme
    committed = (REPO / "docs" / "images" / "report-example.svg").read_text()
    drawn = tmp_path / "drawn.svg"
    subprocess.run([sys.executable, str(REPO / "tools" / "report_example.py"), str(drawn)], check=True, timeout=300,
                   capture_output=True)
    assert drawn.read_text() == committed, \
        "docs/images/report-example.svg is stale: run tools/report_example.py and rsvg-convert (see its docstring)"
    png = (REPO / "docs" / "images" / "report-example.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    size = re.search(r'width="(\d+)" height="(\d+)"', committed)
    assert size is not None and (width, height) == (int(size.group(1)), int(size.group(2)))
    if shutil.which("rsvg-convert") is None:
        pytest.skip("rsvg-convert not installed (apt-get install librsvg2-bin): the PNG was not re-rendered")
    rendered = tmp_path / "again.png"
    subprocess.run(["rsvg-convert", str(REPO / "docs" / "images" / "report-example.svg"), "-o", str(rendered)],
                   check=True, timeout=60)
    assert rendered.read_bytes()[16:24] == png[16:24]
