"""Config files written to hurt: each refused at once, exit 78, naming key, file and line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from hostile_configs import BILLION_LAUGHS, where
from phasewatch.errors import EX_CONFIG

REPO = Path(__file__).resolve().parents[2]




def test_billion_laughs_exits_78_at_once(tmp_path: Path) -> None:
    bad = tmp_path / "laughs.yaml"
    bad.write_text(BILLION_LAUGHS)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "phasewatch", "check-config", str(bad), "--wide"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO / "daemon")})
    elapsed = time.monotonic() - started
    assert done.returncode == EX_CONFIG
    assert re.search(r"^phasewatch: config error: unit\[1\]\[0\]: alias \*a of a list or mapping refused .*"
                     + where(3, str(bad)),
                     done.stderr.strip()), done.stderr
    assert len(done.stderr) < 400
    assert elapsed < 10  # was a minute and GBs; well under a second here
