"""The package's layers, kept visible (docs/architecture.md): what each layer may import, and how
big a module or a class may grow. Read from the source (ast), nothing is imported or run."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "daemon" / "phasewatch"
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 250
# Modules that do I/O or run things in the background: never imported by a pure stage.
IO_MODULES = {"systemd", "pystemd", "httpx", "sqlite3", "socket", "threading", "subprocess", "select", "http",
              "signal", "os", "io", "shutil", "selectors", "asyncio", "urllib", "multiprocessing", "prometheus_client"}
UPPER_LAYERS = {"pipeline", "render", "app", "cli", "sources", "sinks", "commands"}


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def dotted(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> set[str]:
    """Every module `path` imports, as a dotted name inside phasewatch (`stages.lines`) or a foreign
    top-level name (`sqlite3`); also imports inside functions."""
    names: set[str] = set()
    package = dotted(path).split(".")[:-1] if path.name != "__init__.py" else dotted(path).split(".")
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.add(alias.name.removeprefix("phasewatch.") if alias.name.startswith("phasewatch.")
                          else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                module = node.module or ""
                names.add(module.removeprefix("phasewatch.") if module.startswith("phasewatch.")
                          else module.split(".")[0])
                continue
            base = [p for p in package if p][: len([p for p in package if p]) - (node.level - 1)]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            if node.module is None:  # from . import x, y
                names.update(".".join([*base, alias.name]) for alias in node.names)
            else:
                names.add(target)
    return names


def layer(name: str) -> str:
    return name.split(".")[0]


def test_the_layer_rules_see_every_module() -> None:
    found = {dotted(path) for path in modules()}
    assert {"stages.tracker", "sources.follow", "sinks.actions", "commands.status", "app", "cli"} <= found


@pytest.mark.parametrize("path", [p for p in modules() if dotted(p).startswith("stages")], ids=dotted)
def test_stages_do_no_io_and_import_nothing_above_them(path: Path) -> None:
    names = imported(path)
    assert not names & IO_MODULES, f"{dotted(path)} imports I/O modules {sorted(names & IO_MODULES)}"
    upper = {n for n in names if layer(n) in UPPER_LAYERS}
    assert not upper, f"{dotted(path)} imports {sorted(upper)}, above the stages"


@pytest.mark.parametrize("path", [p for p in modules() if layer(dotted(p)) in ("sources", "sinks")], ids=dotted)
def test_sources_and_sinks_never_import_commands(path: Path) -> None:
    names = imported(path)
    assert not {n for n in names if layer(n) in ("commands", "cli")}, dotted(path)


@pytest.mark.parametrize("path", modules(), ids=dotted)
def test_only_cli_and_commands_import_the_app(path: Path) -> None:
    if layer(dotted(path)) in ("cli", "commands", "app"):
        return
    assert "app" not in imported(path), f"{dotted(path)} imports app"


@pytest.mark.parametrize("path", modules(), ids=dotted)
def test_modules_and_classes_stay_small(path: Path) -> None:
    lines = path.read_text().count("\n")
    assert lines <= MAX_MODULE_LINES, f"{dotted(path)}: {lines} lines (at most {MAX_MODULE_LINES})"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= MAX_CLASS_LINES, f"{dotted(path)}.{node.name}: {size} lines (at most {MAX_CLASS_LINES})"


def test_relative_imports_are_resolved() -> None:
    names = imported(PACKAGE / "stages" / "tracker.py")
    assert {"records", "ranks", "stages.snapshot"} <= names
    assert "select" in imported(PACKAGE / "app.py")
