"""PROBE-S3 M-5: a config writable by others was loaded without a word; with hooks, write access to
it is code execution as phasewatch. The daemon and check-config refuse (exit 78, named) a config,
its directory or its profile_path writable by group or others, or owned by an untrusted user."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from phasewatch.cli import main
from phasewatch.config.file_trust import check_trusted, why_untrusted
from phasewatch.errors import ConfigError

TEXT = "unit: sglang-kimi.service\n"
ROOT_ONLY = {0}


@pytest.fixture
def config(tmp_path: Path) -> Path:
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o755)
    path = directory / "sglang-kimi.yaml"
    path.write_text(TEXT)
    path.chmod(0o644)
    return path


def owned(path: Path) -> set[int]:
    return {os.stat(path).st_uid}


def test_a_config_only_its_owner_writes_is_trusted(config: Path) -> None:
    assert why_untrusted(config, owned(config)) is None
    check_trusted(config, None, owned(config))


@pytest.mark.parametrize("mode,who", [(0o666, "group and others"), (0o646, "others"), (0o664, "group")])
def test_a_config_writable_by_others_is_refused(config: Path, mode: int, who: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    config.chmod(mode)
    assert why_untrusted(config, owned(config)) == f"writable by {who} (mode {mode:04o})"
    with pytest.raises(ConfigError, match=f"refused: writable by {who}"):
        check_trusted(config, None, owned(config))
    assert main(["check-config", str(config)]) == 78
    assert "refused: writable by" in capsys.readouterr().err


def test_a_directory_others_may_write_is_refused_unless_sticky(config: Path) -> None:
    config.parent.chmod(0o777)
    assert "its directory is writable by group and others" in (why_untrusted(config, owned(config)) or "")
    config.parent.chmod(0o1777)  # like /tmp: others cannot replace a file they do not own
    assert why_untrusted(config, owned(config)) is None
    config.parent.chmod(0o755)


def test_an_owner_that_is_not_root_or_phasewatch_is_refused(config: Path) -> None:
    assert why_untrusted(config, {owned(config).pop() + 1}) is not None
    assert "owned by uid" in (why_untrusted(config, {owned(config).pop() + 1}) or "")


def test_a_profile_path_writable_by_others_is_refused(config: Path, tmp_path: Path) -> None:
    profile = tmp_path / "etc" / "profile.yaml"
    profile.write_text("x")
    profile.chmod(0o666)
    with pytest.raises(ConfigError, match="profile_path: refused: writable by group and others"):
        check_trusted(config, str(profile), owned(config))
