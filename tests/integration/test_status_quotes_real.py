"""PROBE-S4 C-3: /status and `phasewatch status` showed every local user the line a crash verdict
quotes, credentials included, while the journal refused them. Now the line is masked for everyone,
and held only for a reader who may read the journal: root gets the masked line over a real loopback
socket; uid 65534 (a real process of that uid, `setpriv`) gets the verdict with the line withheld,
from /status and from `phasewatch status`. Black box: the bytes the server sends."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes import UNIT, MetricsFixture, up_to_capture
from phasewatch.sinks.http import MetricsServer, serve

SECRETS = (b"hf_SECRETTOKEN9876", b"hunter2")
CREDENTIALED = ("OSError: 401 Client Error: Unauthorized for url: "
                "https://alice:hf_SECRETTOKEN9876@huggingface.co/api/models/org/private-model (password=hunter2)")
MASKED_URL = b"https://alice:***@huggingface.co/api/models/org/private-model (password=***)"
FETCH = "import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=10).read())"
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to connect as another user")


@pytest.fixture
def server() -> Iterator[MetricsServer]:
    m = MetricsFixture()
    up_to_capture(m.journal)
    m.journal.wait(2)
    m.journal.log("TP3", "Scheduler hit an exception: Traceback (most recent call last):")
    m.journal.raw("TP3", '  File "/usr/lib/python3/dist-packages/huggingface_hub/utils/_http.py", line 409')
    m.journal.raw("TP3", CREDENTIALED)
    m.journal.wait(120)
    m.publish()
    running = serve("127.0.0.1:0", m.exporter)
    assert running is not None
    yield running
    running.close()


def as_nobody(*command: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*AS_NOBODY, *command], capture_output=True, timeout=60, check=False)


def test_root_gets_the_quoted_line_masked(server: MetricsServer) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.address[1]}/status", timeout=10) as response:
        body = response.read()
    (verdict,) = json.loads(body)["invocation"]["verdicts"]
    assert verdict["kind"] == "crashed" and MASKED_URL.decode() in verdict["message"]
    assert json.loads(body)["log_text_withheld"] is False
    assert not any(secret in body for secret in SECRETS)


def test_uid_65534_gets_the_verdict_without_the_line(server: MetricsServer) -> None:
    fetched = as_nobody(sys.executable, "-c", FETCH, f"http://127.0.0.1:{server.address[1]}/status")
    assert fetched.returncode == 0, fetched.stderr
    document = json.loads(fetched.stdout)
    (verdict,) = document["invocation"]["verdicts"]
    assert verdict["kind"] == "crashed" and verdict["rank"] == "TP3"
    assert "log line withheld" in verdict["message"] and document["log_text_withheld"] is True
    assert b"Unauthorized" not in fetched.stdout and b"huggingface.co" not in fetched.stdout


def test_phasewatch_status_as_uid_65534_shows_no_line(server: MetricsServer) -> None:
    with tempfile.TemporaryDirectory() as directory:
        config = Path(directory) / "phasewatch.yaml"
        config.write_text(f"unit: {UNIT}\nmetrics: {{listen: \"127.0.0.1:{server.address[1]}\"}}\n")
        os.chmod(directory, 0o755)
        os.chmod(config, 0o644)
        for output in ([], ["--json"]):
            shown = as_nobody(sys.executable, "-m", "phasewatch", "status", UNIT, "--config", str(config),
                              "--plain", *output)
            assert shown.returncode == 2, shown.stderr  # crashed: will not become ready
            assert b"crashed" in shown.stdout and b"log line withheld" in shown.stdout
            assert b"Unauthorized" not in shown.stdout and b"huggingface.co" not in shown.stdout
            assert not any(secret in shown.stdout + shown.stderr for secret in SECRETS)
