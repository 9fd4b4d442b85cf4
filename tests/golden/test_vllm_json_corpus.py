"""Pasted NDJSON replays right: real vLLM start-ups of the corpus, their logged lines rewritten as
vLLM's JSON logging writes them (one object a line, no process prefix; bars and raw lines stay text),
are judged as their text is: the same outcome, phases and verdicts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from corpus_paths import corpus_dir
from phasewatch.cli import main

HEADER = re.compile(r"^\((?P<name>\w+(?: rank=\d+)?) pid=(?P<pid>\d+)\) (?P<level>[A-Z]+) (?P<date>\d\d-\d\d) "
                    r"(?P<time>\d\d:\d\d:\d\d)(?:\.\d+)? \[(?P<file>[\w.]+\.py):(?P<line>\d+)\] (?P<message>.*)$")
_found = corpus_dir()
CASES = sorted(p.stem for p in _found.glob("*-vllm-*.log")) if _found else []


def as_ndjson(text: str, year: int = 2026) -> tuple[str, int]:
    out, converted = [], 0
    for line in text.split("\n"):
        found = HEADER.match(line)
        if found is None:
            out.append(line)
            continue
        converted += 1
        out.append(json.dumps({"asctime": f"{year}-{found['date']} {found['time']},000", "levelname": found["level"],
                               "name": f"vllm.{found['file'][:-3]}", "message": found["message"],
                               "processName": found["name"], "process": int(found["pid"]),
                               "vllm_process_name": found["name"], "vllm_pid": int(found["pid"]),
                               "filename": found["file"], "lineno": int(found["line"])}))
    return "\n".join(out), converted


def judged(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["replay", "--json", "--engine", "vllm", "--now", "+2h", str(path)]) == 0
    [inv] = json.loads(capsys.readouterr().out)["invocations"]
    return {"outcome": inv["outcome"], "phases": {r: v["phase"] for r, v in inv["ranks"].items()},
            "verdicts": [(v["kind"], v["rank"], v["phase"], v["cause"], (v.get("remedy") or {}).get("text"))
                         for v in inv["verdicts"]]}


@pytest.mark.parametrize("case", CASES)
def test_ndjson_of_a_real_start_up_is_judged_as_its_text(corpus: Path, case: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    text = (corpus / f"{case}.log").read_text("utf-8")
    ndjson, converted = as_ndjson(text)
    if not converted or not ndjson.lstrip().startswith("{"):
        pytest.skip("no line of vLLM's own header first: nothing a JSON logging config would change")
    pasted = tmp_path / f"{case}.ndjson"
    pasted.write_text(ndjson, "utf-8")
    assert judged(pasted, capsys) == judged(corpus / f"{case}.log", capsys)
