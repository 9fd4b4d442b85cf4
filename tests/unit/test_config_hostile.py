"""Config files written to hurt: each refused at once, exit 78, naming key, file and line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from hostile_configs import BILLION_LAUGHS, CANNOT_WORK, FILE, UNITS_TAKEN, where
from phasewatch.cli import main
from phasewatch.config.load import load_config, parse_config
from phasewatch.config.yaml_file import MAX_DEPTH
from phasewatch.durations import SHOWN_CHARS, parse_duration
from phasewatch.errors import EX_CONFIG, ConfigError

REPO = Path(__file__).resolve().parents[2]




def test_window_none_refused() -> None:
    text = "unit: sglang-kimi.service\nrestart_budget:\n  max: 3\n  window: none\n"
    with pytest.raises(ConfigError, match=r"^restart_budget\.window: expected a duration like 6h" + ".*" + where(4)):
        parse_config(text, FILE)


def test_unhashable_key_refused() -> None:
    text = "unit: sglang-kimi.service\nphases:\n  ? [a, b]\n  : 5m\n"
    with pytest.raises(ConfigError, match=r"^phases: a key must be a plain name, not a list or mapping" + where(3)):
        parse_config(text, FILE)


def test_deep_nesting_refused() -> None:
    text = "unit: sglang-kimi.service\npatterns: " + "[" * 1000 + "]" * 1000 + "\n"
    with pytest.raises(ConfigError, match=rf"^patterns(\[0\])+: nested deeper than {MAX_DEPTH} levels" + where(2)):
        parse_config(text, FILE)
    deep_mapping = "".join("  " * i + f"k{i}:\n" for i in range(1000))
    with pytest.raises(ConfigError, match=rf"^k0\.k1\..*: nested deeper than {MAX_DEPTH} levels"):
        parse_config(deep_mapping, FILE)


def test_huge_number_refused() -> None:
    text = "unit: sglang-kimi.service\nrestart_budget:\n  max: " + "9" * 400 + "\n"
    message = r"^restart_budget\.max: number of 400 characters refused \(at most 20\)"
    with pytest.raises(ConfigError, match=message + where(3)):
        parse_config(text, FILE)
    text = "phases:\n  weight_load:\n    deadline: " + "9" * 400 + ".5\n"
    with pytest.raises(ConfigError, match=r"^phases\.weight_load\.deadline: number of 402 characters.*" + where(3)):
        parse_config(text, FILE)


def test_fifo_config_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match=r"^config: not a regular file" + re.escape(f" (file: {fifo})") + "$"):
        load_config(fifo)  # no writer: a blocking open would never return
    assert main(["check-config", str(tmp_path)]) == EX_CONFIG  # a directory likewise


def test_engine_path_refused(tmp_path: Path) -> None:
    profile = REPO / "daemon" / "phasewatch" / "profile" / "profiles" / "sglang.yaml"
    text = f"unit: sglang-kimi.service\nengine: {profile.with_suffix('')}\n"
    with pytest.raises(ConfigError, match=r"^engine: expected a built-in profile name like sglang, got '/.*'"
                                          r" \(a profile file goes in profile_path:\)" + where(2)):
        parse_config(text, FILE)
    with pytest.raises(ConfigError, match=r"^engine: expected a built-in profile name" + ".*" + where(2)):
        parse_config("unit: sglang-kimi.service\nengine: ../../../tmp/x\n", FILE)
    # the explicit way: profile_path, an absolute path, read through the same guarded loader
    config = parse_config(f"unit: sglang-kimi.service\nprofile_path: {profile}\n", FILE)
    assert config.engine == "sglang" and config.engine_profile().rules
    with pytest.raises(ConfigError, match=r"^profile_path: expected an absolute path" + ".*" + where(2)):
        parse_config("unit: sglang-kimi.service\nprofile_path: profiles/x.yaml\n", FILE)
    laughs = tmp_path / "profile.yaml"
    laughs.write_text(BILLION_LAUGHS)
    with pytest.raises(ConfigError, match=r"alias \*a of a list or mapping refused"):
        parse_config(f"unit: sglang-kimi.service\nprofile_path: {laughs}\n", FILE)


def test_inf_deadline_refused() -> None:
    text = "phases:\n  weight_load:\n    deadline: .inf\n"
    with pytest.raises(ConfigError, match=r"^phases\.weight_load\.deadline: expected a duration of at most 365d, "
                                          r"got inf" + where(3)):
        parse_config(text, FILE)
    with pytest.raises(ValueError, match=r"at most 365d"):
        parse_duration("99999999d")
    with pytest.raises(ConfigError, match=r"^adaptive\.k: expected a positive number, got inf" + where(3)):
        parse_config("adaptive:\n  enabled: true\n  k: .inf\n", FILE)


def test_port_out_of_range_refused() -> None:
    text = "unit: sglang-kimi.service\nmetrics:\n  listen: 127.0.0.1:99999\n"
    with pytest.raises(ConfigError, match=r"^metrics\.listen: port 99999 out of range \(1\.\.65535\)" + where(3)):
        parse_config(text, FILE)


def test_duplicate_key_refused() -> None:
    text = "unit: sglang-kimi.service\nrestart_budget:\n  max: 3\n  max: 1000\n"
    with pytest.raises(ConfigError, match=r"^restart_budget\.max: duplicate key \(first at line 3\)" + where(4)):
        parse_config(text, FILE)
    with pytest.raises(ConfigError, match=r"^unit: duplicate key \(first at line 1\)" + where(2)):
        parse_config("unit: a.service\nunit: b.service\n", FILE)


def test_error_messages_cut_long_values() -> None:
    text = "unit: '" + "x" * 100_000 + "'\n"
    with pytest.raises(ConfigError) as info:
        parse_config(text, FILE)
    assert len(str(info.value)) < SHOWN_CHARS + 200
    assert "...(cut)" in str(info.value) or "..." in str(info.value)
    text = "? " + "x" * 100_000 + "\n: 1\n"  # an explicit key: YAML caps only implicit ones
    with pytest.raises(ConfigError) as info:
        parse_config(text, FILE)
    assert len(str(info.value)) < 600 and info.value.key == "x" * 100_000


@pytest.mark.parametrize("text,key,line,message", [row[1:] for row in CANNOT_WORK],
                         ids=[row[0] for row in CANNOT_WORK])
def test_a_setting_that_cannot_work_exits_78_naming_key_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                   text: str, key: str, line: int,
                                                                   message: str) -> None:
    path = tmp_path / "sglang-kimi.yaml"
    path.write_text(text, "utf-8")
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: {message}") as info:
        load_config(path)
    assert (info.value.key, info.value.line) == (key, line)
    assert main(["check-config", str(path)]) == EX_CONFIG
    assert f"{key}: " in capsys.readouterr().err


@pytest.mark.parametrize("unit", UNITS_TAKEN)
def test_unit_names_systemd_takes_are_taken(unit: str) -> None:
    assert parse_config(f"unit: '{unit}'\n").unit == unit


def test_restart_budget_max_of_100_is_taken() -> None:
    assert parse_config("unit: sglang-kimi.service\nrestart_budget: {max: 100}\n").restart_budget.max == 100


def test_a_unit_name_systemd_refuses_over_dbus_is_a_config_error() -> None:
    """L-4: LoadUnit's EINVAL was UnavailableError (exit 69, the unit restarted it until its start
    limit); the name is the config's: exit 78. Other D-Bus failures stay UnitError."""
    from pystemd.dbusexc import DBusInvalidArgsError

    from phasewatch.errors import UnitError
    from phasewatch.systemd_unit import SystemdUnit

    def refuses(name: bytes) -> object:
        raise DBusInvalidArgsError(-22, None, b"Unit name " + name + b" is neither a valid invocation ID nor unit "
                                   b"name.")

    refused = r"^unit: systemd refuses the unit name 'sglang-k\xefmi\.service': \[err -22\]"
    with pytest.raises(ConfigError, match=refused) as info:
        SystemdUnit("sglang-k\xefmi.service", refuses).load_state()
    assert info.value.exit_status == EX_CONFIG
    with pytest.raises(ConfigError):
        SystemdUnit("x.service", refuses).facts()

    def unreachable(name: bytes) -> object:
        raise OSError("[err -2]: b'No such file or directory'")

    with pytest.raises(UnitError):
        SystemdUnit("x.service", unreachable).load_state()
