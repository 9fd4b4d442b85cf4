"""The package's layers, kept visible (docs/architecture.md): what each layer may import, no import
circle, how big a module, a class or a function may grow (lines, parameters), and that a test names
every module. Read from the source (ast), nothing is imported or run. The checks take the package's
directory, so the planted-violation tests run them over a copy."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "daemon" / "phasewatch"
MAX_MODULE_LINES = 450
MAX_CLASS_LINES = 250
NEAR_MODULE_LINES = MAX_MODULE_LINES * 95 // 100  # a module this long is split before it must be
MAX_FUNCTION_LINES = 60
MAX_PARAMETERS = 8  # besides self and cls
# Over the caps today, in modules other work is rewriting; each entry must still be over its cap (the
# test says when one is not), so the set only shrinks.
KNOWN_NEAR_CAP: set[str] = set()
KNOWN_LONG: set[str] = set()
KNOWN_WIDE: set[str] = set()
# Modules no test file names yet (by import, `phasewatch.<module>` or its path): each a debt.
KNOWN_UNNAMED: set[str] = set()
# Modules that do I/O or run things in the background: never imported by a pure stage.
IO_MODULES = {"systemd", "pystemd", "httpx", "sqlite3", "socket", "threading", "subprocess", "select", "http",
              "signal", "os", "io", "shutil", "selectors", "asyncio", "urllib", "multiprocessing", "prometheus_client"}
# Bottom to top: a module imports its own layer and the layers below, never one above. A layer is a
# set of module names; a name ending in "." is every module of that package. The stages' groups are
# layers of their own, in the order data flows through them.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = tuple((name, frozenset(members.split())) for name, members in (
    ("base", " __init__ records errors durations clock prefixes ranks"),
    ("engines", "engines engines."),
    ("config", "profile profile. config config."),
    ("stages", "stages"),
    ("stages.s1_read", "stages.s1_read stages.s1_read."),
    ("stages.s2_interpret", "stages.s2_interpret stages.s2_interpret."),
    ("stages.s3_track", "stages.s3_track stages.s3_track."),
    ("stages.s4_judge", "stages.s4_judge stages.s4_judge."),
    ("stages.s5_act", "stages.s5_act stages.s5_act."),
    ("pipeline", "pipeline"),
    ("output", "output output.render output.fit output.verdict_lines"),
    ("edge", "systemd_unit"),
    ("judge", "judge"),
    ("sources", "sources sources."),
    ("sinks", "sinks sinks."),
    ("app", "app"),
    ("compose", "compose"),
    ("commands", "commands commands."),
    ("cli", "cli __main__ output.manpages"),
))


def modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(package.rglob("*.py"))


def dotted(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts) or "__init__"


def _is_module(package: Path, name: str) -> bool:
    path = package.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def imported(path: Path, package: Path = PACKAGE) -> set[str]:
    """Every module `path` imports, as a dotted name inside phasewatch (`stages.s1_read.lines`) or a
    foreign top-level name (`sqlite3`); also imports inside functions and under TYPE_CHECKING.
    `from package import module` names the module, `from module import name` the module."""
    names: set[str] = set()
    own = dotted(path, package)
    here = (own.split(".") if path.name == "__init__.py" else own.split(".")[:-1]) if own != "__init__" else []

    def add_from(base: str, aliases: list[ast.alias]) -> None:
        members = {f"{base}.{a.name}".lstrip(".") for a in aliases}
        found = {m for m in members if _is_module(package, m)}
        names.update(found)
        if found != members:
            names.add(base or "__init__")

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names.add(alias.name.removeprefix("phasewatch.") if alias.name.startswith("phasewatch.")
                          else alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 0 and (module == "phasewatch" or module.startswith("phasewatch.")):
                add_from(module.removeprefix("phasewatch").removeprefix("."), node.names)
            elif node.level == 0:
                names.add(module.split(".")[0])
            else:
                base = here[: len(here) - (node.level - 1)]
                add_from(".".join([*base, *(module.split(".") if module else [])]), node.names)
    return names


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a name imported from a module is that module)."""
    paths = {dotted(p, package): p for p in modules(package)}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        targets = {n for n in imported(path, package) if n in paths}
        graph[name] = targets - {name}
    return graph


def layer_of(module: str) -> int:
    for index, (_, members) in enumerate(LAYERS):
        if module in members or any(m.endswith(".") and module.startswith(m) for m in members):
            return index
    raise LookupError(f"{module} is in no layer: add it to LAYERS (docs/architecture.md says where)")


def upward_imports(package: Path = PACKAGE) -> list[str]:
    """'a imports b (layer of b above layer of a)' for every import against the layers."""
    found = []
    for module, targets in sorted(import_graph(package).items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(module):
                found.append(f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} "
                             f"({LAYERS[layer_of(target)][0]})")
    return found


def import_circles(package: Path = PACKAGE) -> list[list[str]]:
    """Every set of modules that import each other, round about (Tarjan's strongly connected
    components of more than one module)."""
    graph = import_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_the_layer_rules_see_every_module() -> None:
    found = {dotted(path) for path in modules()}
    assert {"stages.s3_track.tracker", "sources.journal.follow", "sinks.actions", "commands.status", "app", "cli",
            "engines.sglang", "systemd_unit"} <= found
    for module in found:
        layer_of(module)  # every module is in a layer


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert upward_imports() == []


def test_no_import_circle() -> None:
    assert import_circles() == []


@pytest.mark.parametrize("path", [p for p in modules() if dotted(p).startswith("stages")], ids=dotted)
def test_stages_do_no_io(path: Path) -> None:
    names = imported(path)
    assert not names & IO_MODULES, f"{dotted(path)} imports I/O modules {sorted(names & IO_MODULES)}"


@pytest.mark.parametrize("path", modules(), ids=dotted)
def test_modules_and_classes_stay_small(path: Path) -> None:
    lines = path.read_text().count("\n")
    assert lines <= MAX_MODULE_LINES, f"{dotted(path)}: {lines} lines (at most {MAX_MODULE_LINES})"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef):
            size = (node.end_lineno or node.lineno) - node.lineno + 1
            assert size <= MAX_CLASS_LINES, f"{dotted(path)}.{node.name}: {size} lines (at most {MAX_CLASS_LINES})"


def functions(package: Path = PACKAGE) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    """Every function and method by its dotted name (`commands.run.cmd_run`, `app.Daemon.step`)."""
    found: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found[f"{prefix}.{child.name}"] = child
                visit(child, f"{prefix}.{child.name}")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}.{child.name}")
            else:
                visit(child, prefix)

    for path in modules(package):
        visit(ast.parse(path.read_text()), dotted(path, package))
    return found


def function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    return (node.end_lineno or node.lineno) - node.lineno + 1


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    named = [*args.posonlyargs, *args.args]
    own = 1 if named and named[0].arg in ("self", "cls") else 0
    return len(named) - own + len(args.kwonlyargs) + (args.vararg is not None) + (args.kwarg is not None)


def long_functions(package: Path = PACKAGE) -> dict[str, int]:
    return {name: function_lines(node) for name, node in functions(package).items()
            if function_lines(node) > MAX_FUNCTION_LINES}


def wide_functions(package: Path = PACKAGE) -> dict[str, int]:
    return {name: parameters(node) for name, node in functions(package).items() if parameters(node) > MAX_PARAMETERS}


def test_functions_stay_short() -> None:
    found = long_functions()
    assert set(found) - KNOWN_LONG == set(), f"over {MAX_FUNCTION_LINES} lines: {found}"
    assert KNOWN_LONG - set(found) == set(), "no longer over the cap: take them out of KNOWN_LONG"


def test_functions_take_few_parameters() -> None:
    found = wide_functions()
    assert set(found) - KNOWN_WIDE == set(), f"over {MAX_PARAMETERS} parameters: {found}"
    assert KNOWN_WIDE - set(found) == set(), "no longer over the cap: take them out of KNOWN_WIDE"


def test_no_module_is_near_its_cap() -> None:
    near = {dotted(p) for p in modules() if p.read_text().count("\n") > NEAR_MODULE_LINES}
    assert near - KNOWN_NEAR_CAP == set(), f"within 5 % of {MAX_MODULE_LINES} lines: split along a real seam"
    assert KNOWN_NEAR_CAP - near == set(), "no longer near the cap: take them out of KNOWN_NEAR_CAP"


MAX_ROOT_MODULES = 14


def test_the_package_root_shows_the_skeleton() -> None:
    """cli -> compose/app -> pipeline -> stages, over records, errors, clock: everything else is in
    the room of its kind (config/, profile/, sources/, sinks/, output/, ...)."""
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules in the package root: {root}"


TESTS = PACKAGE.parents[1] / "tests"


def unnamed_modules(package: Path = PACKAGE, tests: Path = TESTS) -> set[str]:
    """The package's modules (not package markers) that no test file imports or names, as
    `phasewatch.<module>` or as its path inside the package (`config/load.py`)."""
    own = {dotted(p, package): p for p in modules(package) if p.name not in ("__init__.py", "__main__.py")}
    named: set[str] = set()
    for test in tests.rglob("*.py"):
        text = test.read_text()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("phasewatch"):
                base = (node.module or "").removeprefix("phasewatch").removeprefix(".")
                named.update({base, *(f"{base}.{a.name}".lstrip(".") for a in node.names)})
            elif isinstance(node, ast.Import):
                named.update(a.name.removeprefix("phasewatch.") for a in node.names)
        named.update(m for m, p in own.items()
                     if f"phasewatch.{m}" in text or str(p.relative_to(package)) in text)
    return set(own) - named


def test_every_module_is_named_by_a_test() -> None:
    found = unnamed_modules()
    assert found - KNOWN_UNNAMED == set(), "no test file imports or names these modules"
    assert KNOWN_UNNAMED - found == set(), "named by a test now: take them out of KNOWN_UNNAMED"


def misnamed_parts(package: Path = PACKAGE) -> dict[str, str]:
    """Classes that say their kind by shape and not by name: a source (sources/, `collect(now,
    readable)`) must end in `Source`, a sink (sinks/, `tell(step)`) in `Sink`."""
    shapes = (("sources", "collect", ("self", "now", "readable"), "Source"),
              ("sinks", "tell", ("self", "step"), "Sink"))
    found: dict[str, str] = {}
    for room, method, params, suffix in shapes:
        for path in sorted((package / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ClassDef) or node.name.endswith(suffix):
                    continue
                if any(isinstance(f, ast.FunctionDef) and f.name == method
                       and tuple(a.arg for a in f.args.args) == params for f in node.body):
                    found[f"{dotted(path, package)}.{node.name}"] = suffix
    return found


def test_sources_and_sinks_say_their_kind() -> None:
    assert misnamed_parts() == {}


def test_a_source_not_named_so_is_found(copy: Path) -> None:
    (copy / "sources" / "host" / "newfeed.py").write_text(
        "class Feed:\n    def collect(self, now, readable):\n        return []\n")
    (copy / "sinks" / "newsink.py").write_text("class Teller:\n    def tell(self, step):\n        pass\n")
    assert misnamed_parts(copy) == {"sources.host.newfeed.Feed": "Source", "sinks.newsink.Teller": "Sink"}


def test_relative_and_absolute_imports_are_resolved() -> None:
    names = imported(PACKAGE / "stages" / "s3_track" / "tracker.py")
    assert {"records", "ranks", "stages.s3_track.snapshot"} <= names
    assert "select" in imported(PACKAGE / "app.py")
    assert "stages.s2_interpret.crashfacts" in import_graph()["stages.s4_judge.policy"]


# --- the checks fail on a planted violation ---------------------------------------------------------

@pytest.fixture
def copy(tmp_path: Path) -> Path:
    return Path(shutil.copytree(PACKAGE, tmp_path / "phasewatch", ignore=shutil.ignore_patterns("*.so", "__pycache__")))


def plant(module: Path, line: str) -> None:
    text = module.read_text()
    head, sep, rest = text.partition("from __future__ import annotations\n")
    module.write_text(head + sep + line + "\n" + rest)


@pytest.mark.parametrize("where, line, expected", [
    ("sources/host/probe.py", "from ...sinks import actions",
     "sources.host.probe (sources) imports sinks.actions (sinks)"),
    ("sources/host/health.py", "from phasewatch.sinks.state import StateFile",
     "sources.host.health (sources) imports sinks.state (sinks)"),
    ("stages/s1_read/lines.py", "from ...commands import status",
     "stages.s1_read.lines (stages.s1_read) imports commands.status (commands)"),
    ("stages/s3_track/snapshot.py", "from ..s4_judge.policy import judge",
     "stages.s3_track.snapshot (stages.s3_track) imports stages.s4_judge.policy (stages.s4_judge)"),
    ("profile/load.py", "from ..stages.s1_read import lines",
     "profile.load (config) imports stages.s1_read.lines (stages.s1_read)"),
])
def test_an_upward_import_is_caught(copy: Path, where: str, line: str, expected: str) -> None:
    assert upward_imports(copy) == []
    plant(copy / where, line)
    assert upward_imports(copy) == [expected]


def test_a_circle_is_caught_even_inside_one_layer(copy: Path) -> None:
    assert import_circles(copy) == []
    plant(copy / "errors.py", "from . import durations  # durations imports errors")
    assert import_circles(copy) == [["durations", "errors"]]
    assert upward_imports(copy) == []  # (both are base: only the circle check sees it)


def test_a_circle_through_a_function_level_import_is_caught(copy: Path) -> None:
    follow = copy / "sources" / "journal" / "journal_reader.py"
    follow.write_text(follow.read_text() + "\n\ndef _late() -> None:\n    from . import follow  # noqa: F401\n")
    assert import_circles(copy) == [["sources.journal.follow", "sources.journal.journal_reader",
                                     "sources.journal.journal_source"]]


def test_a_module_in_no_layer_is_named(copy: Path) -> None:
    (copy / "newthing.py").write_text("from .records import MAIN\n")
    with pytest.raises(LookupError, match="newthing is in no layer"):
        upward_imports(copy)


def test_a_long_function_and_a_wide_one_are_caught(copy: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    params = ", ".join(f"a{i}: int" for i in range(MAX_PARAMETERS + 1))
    (copy / "ranks.py").write_text((copy / "ranks.py").read_text() + f"\n\ndef _long() -> None:\n{body}"
                                   f"\n\nclass _Wide:\n    def __init__(self, {params}) -> None:\n        pass\n")
    assert long_functions(copy) == {**{n: long_functions()[n] for n in KNOWN_LONG}, "ranks._long": 61}
    assert set(wide_functions(copy)) == KNOWN_WIDE | {"ranks._Wide.__init__"}


def test_a_module_no_test_names_is_listed(copy: Path) -> None:
    (copy / "stages" / "s4_judge" / "newrule.py").write_text('"""A rule."""\n')
    assert unnamed_modules(copy) == KNOWN_UNNAMED | {"stages.s4_judge.newrule"}
