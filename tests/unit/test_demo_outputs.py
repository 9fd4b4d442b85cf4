"""The demo writes what it captures into build/demo/, never over a tracked file; the simulator's
scenarios make the bundled examples, as the README says."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
from sglang_sim import SCENARIOS
from sglang_sim import main as simulate

from phasewatch.cli import main

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


def test_the_readmes_scenarios_make_the_bundled_examples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`python tools/sglang_sim.py --scenario NAME > examples/sglang-kimi-NAME.json`, as the README
    says (it exited 2): each scenario's journal is judged as its bundled example is."""
    readme = (DEMO.parents[1] / "README.md").read_text()
    named = re.search(r"\(scenarios: ([^)]*)\)", readme)
    assert named is not None and set(re.findall(r"`([\w-]+)`", named.group(1))) == set(SCENARIOS)

    def judged(path: Path) -> list[tuple[object, ...]]:
        assert main(["replay", "--json", "--now", "+25m", str(path)]) == 0
        return [(inv["outcome"], inv["phase"], *((v["kind"], v["rank"], v["phase"]) for v in inv["verdicts"]))
                for inv in json.loads(capsys.readouterr().out)["invocations"]]

    for name in SCENARIOS:
        assert simulate(["--scenario", name]) == 0
        made = tmp_path / f"{name}.json"
        made.write_text(capsys.readouterr().out)
        assert judged(made) == judged(DEMO.parents[1] / "examples" / f"sglang-kimi-{name}.json"), name
