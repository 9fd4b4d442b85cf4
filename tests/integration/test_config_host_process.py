"""PROBE-S4 H-2, H-3 with real processes: the TLS pairs made by openssl, and `phasewatch run` exiting
78 on a token file others may read, before it reaches systemd (the unit need not exist). The checks
themselves: tests/unit/test_config_host.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hostile_configs import receiver, write_config
from phasewatch.cli import main
from phasewatch.config.host import check_on_host, tls_problem
from phasewatch.config.load import load_config
from phasewatch.errors import EX_CONFIG, ConfigError

REPO = Path(__file__).resolve().parents[2]
TOKEN = "a-token-long-enough-0123456789\n"


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    directory = tmp_path / "etc"
    directory.mkdir(mode=0o755)
    return directory


@pytest.fixture
def token(etc: Path) -> Path:
    path = etc / "group.token"
    path.write_text(TOKEN)
    path.chmod(0o400)
    return path


def refused(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """check_on_host's error, after check-config said the same with exit 78."""
    with pytest.raises(ConfigError) as info:
        check_on_host(path, load_config(path))
    capsys.readouterr()
    assert main(["check-config", str(path), "--wide"]) == EX_CONFIG  # (the error on one line)
    assert str(info.value) in capsys.readouterr().err
    return str(info.value)


def test_the_daemon_exits_78_on_a_token_others_may_read(etc: Path, token: Path) -> None:
    """`phasewatch run` refuses before it reaches systemd (the unit need not exist)."""
    token.chmod(0o644)
    config = write_config(etc, receiver(token))
    done = subprocess.run([sys.executable, "-m", "phasewatch", "run", "--config", str(config)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO / "daemon")})
    assert done.returncode == EX_CONFIG, done.stderr
    assert "group.receiver.token_file: refused: readable by group and others (mode 0644)" in done.stderr




# --- H-2: the TLS pair ----------------------------------------------------------------------------

def make_pair(directory: Path, name: str, *extra: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", *(extra or ("-nodes",))], check=True, capture_output=True,
                   timeout=60)
    key.chmod(0o400)
    return cert, key


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed")
    directory = tmp_path_factory.mktemp("tls")
    return {"a": make_pair(directory, "a"), "b": make_pair(directory, "b"),
            "encrypted": make_pair(directory, "encrypted", "-passout", "pass:secret")}


def test_a_tls_pair_that_loads_is_taken(etc: Path, token: Path, pairs: dict[str, tuple[Path, Path]]) -> None:
    cert, key = pairs["a"]
    assert tls_problem(str(cert), str(key)) is None
    config = write_config(etc, receiver(token, tls_cert=cert, tls_key=key))
    check_on_host(config, load_config(config))
    assert main(["check-config", str(config)]) == 0


@pytest.mark.parametrize("case,key,message", [
    ("missing cert", "tls_cert", r"cannot read .*/absent\.crt: No such file or directory"),
    ("missing key", "tls_key", r"cannot read .*/absent\.key: No such file or directory"),
    ("cert a directory", "tls_cert", r"cannot read .*: not a regular file"),
    ("another cert's key", "tls_key", r".*/b\.key is not the key of the certificate in .*/a\.crt"),
    ("a key as the cert", "tls_cert", r"no PEM certificate in .*/a\.key"),
    ("a cert as the key", "tls_key", r"no unencrypted PEM private key in .*/a\.crt \(phasewatch has no "
                                     r"passphrase to give\)"),
    ("encrypted key", "tls_key", r"no unencrypted PEM private key in .*/encrypted\.key \(phasewatch has no "
                                 r"passphrase to give\)"),
])
def test_a_tls_pair_that_does_not_load_is_refused_naming_the_key(
        etc: Path, token: Path, pairs: dict[str, tuple[Path, Path]], case: str, key: str, message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    cert_a, key_a = pairs["a"]
    cert, tls_key = {"missing cert": (etc / "absent.crt", key_a), "missing key": (cert_a, etc / "absent.key"),
                     "cert a directory": (etc, key_a), "another cert's key": (cert_a, pairs["b"][1]),
                     "a key as the cert": (key_a, key_a), "a cert as the key": (cert_a, cert_a),
                     "encrypted key": pairs["encrypted"]}[case]
    config = write_config(etc, receiver(token, tls_cert=cert, tls_key=tls_key))
    line = 10 if key == "tls_cert" else 11
    assert re.fullmatch(rf"group\.receiver\.{key}: {message} \(file: {re.escape(str(config))}, line {line}\)",
                        refused(config, capsys))
