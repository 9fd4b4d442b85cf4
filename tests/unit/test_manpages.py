"""The man pages cannot drift: the committed man/ pages are what phasewatch.output.manpages writes from
the current parser (every command, every option), config keys and unit file."""

from __future__ import annotations

from pathlib import Path

from phasewatch.cli import build_parser
from phasewatch.config.load import TOP_KEYS
from phasewatch.errors import EXIT_STATUSES
from phasewatch.output.manpages import KEY_DOCS, PAGES, _commands, _esc, render_all

REPO = Path(__file__).resolve().parents[2]


def pages() -> dict[str, str]:
    return render_all((REPO / "config" / "phasewatch.yaml").read_text(),
                      (REPO / "units" / "phasewatch@.service").read_text())


def test_the_committed_pages_are_the_generated_ones() -> None:
    for name, text in pages().items():
        committed = (REPO / "man" / name).read_text()
        assert committed == text, f"man/{name} is stale: run `make man` (PYTHON=.venv/bin/python)"
    assert sorted(p.name for p in (REPO / "man").iterdir()) == sorted(PAGES)


def test_phasewatch_1_has_every_command_option_and_exit_status() -> None:
    page = pages()["phasewatch.1"]
    for name, _, sub in _commands(build_parser()):
        assert f"\n.SS {_esc(name)}\n" in page, name
        for action in sub._actions:
            for option in action.option_strings:
                if action.help != "==SUPPRESS==":
                    assert option.replace("-", "\\-") in page, (name, option)
    for code, meaning in EXIT_STATUSES:
        assert f".TP\n\\fB{code}\\fR\n{_esc(meaning)}\n" in page, code


def test_every_config_key_is_in_phasewatch_yaml_5() -> None:
    assert set(KEY_DOCS) == set(TOP_KEYS)
    page = pages()["phasewatch.yaml.5"]
    for key in TOP_KEYS:
        assert f"\\fB{key}\\fR" in page, key


def test_the_unit_and_the_catalog_point_to_the_pages() -> None:
    unit = (REPO / "units" / "phasewatch@.service").read_text()
    assert "Documentation=man:phasewatch@.service(8) man:phasewatch(1) man:phasewatch.yaml(5)" in unit
    catalog = (REPO / "units" / "phasewatch.catalog").read_text()
    supports = [line for line in catalog.splitlines() if line.startswith("Support:")]
    assert supports and all("man:phasewatch(1)" in line for line in supports)
    assert "@PHASEWATCH_UNIT@.yaml" not in catalog  # the file is NAME.yaml, not NAME.service.yaml
