"""PROBE-S4 H-2, H-3: configs that load but cannot work on this host. A receiver on the port of
metrics.listen, or with a TLS pair that does not load, left the node without group restarts (said in
one log line); a token file every local user could read let any of them restart the server. The
daemon (at start and reload) and check-config refuse them alike: exit 78, the key and line named.
Real files of real modes and owners (the tests run as root where chown is needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostile_configs import receiver, write_config
from phasewatch.cli import main
from phasewatch.config.file_trust import check_token_file, why_exposed
from phasewatch.config.host import check_on_host, listeners_overlap
from phasewatch.config.load import load_config
from phasewatch.errors import EX_CONFIG, ConfigError

TOKEN = "a-token-long-enough-0123456789\n"
NOBODY = 65534


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
    assert main(["check-config", str(path), "--wide"]) == EX_CONFIG
    assert str(info.value) in capsys.readouterr().err
    return str(info.value)


# --- H-3: the token file --------------------------------------------------------------------------

@pytest.mark.parametrize("mode,why", [
    (0o644, "readable by group and others (mode 0644)"),
    (0o604, "readable by others (mode 0604)"),
    (0o440, "readable by group (mode 0440)"),
    (0o606, "readable and writable by others (mode 0606)"),
    (0o602, "writable by others (mode 0602)"),
    (0o420, "writable by group (mode 0420)"),
])
def test_a_token_others_may_read_or_write_is_refused(etc: Path, token: Path, mode: int, why: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(etc, receiver(token))
    check_on_host(config, load_config(config))  # 0400: taken
    token.chmod(mode)
    message = refused(config, capsys)
    assert message.startswith(f"group.receiver.token_file: refused: {why} ({token}). Whoever reads the token")
    assert message.endswith(f"(file: {config}, line 9)")


@pytest.mark.parametrize("mode", [0o400, 0o600])
def test_a_token_only_its_owner_reads_is_taken(token: Path, mode: int) -> None:
    token.chmod(mode)
    assert why_exposed(token, {0, os.geteuid()}) is None
    check_token_file(str(token))


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_a_token_owned_by_another_user_is_refused(token: Path) -> None:
    os.chown(token, NOBODY, NOBODY)  # mode 0400: only that user reads it, and may rewrite it
    with pytest.raises(ConfigError, match=rf"^group\.receiver\.token_file: refused: owned by uid {NOBODY}, "):
        check_token_file(str(token))


def test_a_token_that_is_not_a_regular_file_is_refused(etc: Path, token: Path) -> None:
    fifo = etc / "fifo.token"
    os.mkfifo(fifo, 0o600)
    for path in (fifo, etc, Path("/dev/null")):  # a FIFO would block the read: refused before it
        with pytest.raises(ConfigError, match=r"refused: not a regular file"):
            check_token_file(str(path))
    link = etc / "link.token"
    link.symlink_to(token)  # judged by what it leads to: a 0400 file of root
    check_token_file(str(link))
    token.chmod(0o644)
    with pytest.raises(ConfigError, match=r"refused: readable by group and others"):
        check_token_file(str(link))


def test_a_token_in_a_directory_others_may_write_is_refused(etc: Path, token: Path) -> None:
    etc.chmod(0o777)  # anyone there may put their own token in its place
    with pytest.raises(ConfigError, match=r"refused: its directory is writable by group and others"):
        check_token_file(str(token))
    etc.chmod(0o755)


def test_a_missing_token_is_named(etc: Path) -> None:
    with pytest.raises(ConfigError, match=r"^group\.receiver\.token_file: cannot read the token: No such file"):
        check_token_file(str(etc / "absent"))


def test_a_reload_with_an_exposed_token_is_refused(etc: Path, token: Path) -> None:
    """The daemon's reload reads the config through the same check (commands/run.py read_config)."""
    from phasewatch.app import reloaded_config

    config = write_config(etc, receiver(token))
    old = load_config(config)

    def read() -> object:
        loaded = load_config(config)
        check_on_host(config, loaded)
        return loaded

    assert reloaded_config(read, old) == old  # type: ignore[arg-type]
    token.chmod(0o604)
    assert reloaded_config(read, old) is None  # type: ignore[arg-type]


# --- H-2: listen addresses ------------------------------------------------------------------------

@pytest.mark.parametrize("metrics,listen,overlap", [
    ("127.0.0.1:9878", "127.0.0.1:9878", True),
    ("0.0.0.0:9878", "127.0.0.1:9878", True),
    ("127.0.0.1:9878", "0.0.0.0:9878", True),
    ("[::]:9878", "127.0.0.1:9878", True),    # [::] takes IPv4 too (bindv6only=0)
    ("10.0.0.2:9878", "[::]:9878", True),
    ("[::]:9878", "[::1]:9878", True),
    ("0.0.0.0:9878", "[::]:9878", True),
    ("[::ffff:127.0.0.1]:9878", "127.0.0.1:9878", True),
    ("localhost:9878", "localhost:9878", True),
    ("127.0.0.1:9877", "127.0.0.1:9878", False),
    ("127.0.0.1:9878", "127.0.0.2:9878", False),
    ("0.0.0.0:9878", "[::1]:9878", False),   # two families: both bind
    ("nonexistent.invalid:9878", "127.0.0.1:9878", False),  # (its own bind fails, said at start)
])
def test_listeners_overlap_as_their_binds_would(metrics: str, listen: str, overlap: bool) -> None:
    assert listeners_overlap(metrics, listen) is overlap
    assert listeners_overlap(listen, metrics) is overlap


def test_localhost_is_resolved_to_what_its_listener_binds() -> None:
    import socket

    first = socket.getaddrinfo("localhost", 9878, type=socket.SOCK_STREAM)[0][4][0]
    assert listeners_overlap("localhost:9878", f"[{first}]:9878" if ":" in first else f"{first}:9878")


def test_a_receiver_on_the_metrics_port_is_refused_naming_both(etc: Path, token: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(etc, receiver(token, "127.0.0.1:9878"), metrics="0.0.0.0:9878")
    message = refused(config, capsys)
    assert message == (f"group.receiver.listen: 127.0.0.1:9878 and metrics.listen (0.0.0.0:9878, line 3) take the "
                       "same port: both cannot be bound, and without its receiver the node makes no group restart "
                       f"(give them different ports) (file: {config}, line 8)")
    check_on_host(write_config(etc, receiver(token, "127.0.0.1:9878")), load_config(etc / "sglang-kimi.yaml"))
