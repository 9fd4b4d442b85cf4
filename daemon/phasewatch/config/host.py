"""The config's checks that need this host: the files it names and the addresses it resolves.

One function, `check_on_host`, run wherever a config is read for use: by the daemon at start and at
each reload (commands/run.py) and by `check-config`, so that both refuse the same things (ConfigError,
exit 78, key, file and line named). Each is a config that loads but cannot work here:

- the config or its profile_path writable by someone untrusted (file_trust.check_trusted);
- a `group.receiver.token_file` others may read or write (file_trust.check_token_file);
- `group.receiver.tls_cert`/`tls_key` missing, unreadable or not a pair: they are loaded as the
  receiver loads them (without a passphrase: the daemon has none to give);
- `metrics.listen` and `group.receiver.listen` on the same port of overlapping addresses (equal, or
  one of them the wildcard of its family, `[::]` of both): the receiver's bind would fail, and the
  node would run on without group restarts. A host name is resolved as the listener's bind resolves
  it (its first address); only when the two ports are equal.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import ssl
import stat
from pathlib import Path

from ..errors import ConfigError
from .file_trust import check_token_file, check_trusted, trusted_owners
from .load import Config

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def check_on_host(config_path: str | Path, config: Config, owners: set[int] | None = None) -> None:
    """Raises ConfigError (exit 78) for the first of the checks above that fails."""
    owners = trusted_owners() if owners is None else owners
    check_trusted(config_path, config.profile_path, owners)
    receiver = config.group.receiver if config.group is not None else None
    if receiver is None:
        return
    path = str(config_path)
    check_token_file(receiver.token_file, owners, path, receiver.lines.get("token_file"))
    if receiver.tls_cert is not None and receiver.tls_key is not None:
        problem = tls_problem(receiver.tls_cert, receiver.tls_key)
        if problem is not None:
            key, why = problem
            raise ConfigError(f"group.receiver.{key}", why, path, receiver.lines.get(key))
    if listeners_overlap(config.metrics_listen, receiver.listen):
        raise ConfigError("group.receiver.listen", f"{receiver.listen} and metrics.listen ({config.metrics_listen}"
                          f"{_at(config.metrics_listen_line)}) take the same port: both cannot be bound, and "
                          "without its receiver the node makes no group restart (give them different ports)",
                          path, receiver.lines.get("listen"))


def _at(line: int | None) -> str:
    return f", line {line}" if line is not None else ""


def tls_problem(cert: str, key: str) -> tuple[str, str] | None:
    """("tls_cert" or "tls_key", what is wrong), or None when the two load as the receiver's pair."""
    for name, path in (("tls_cert", cert), ("tls_key", key)):
        problem = _unreadable(path)
        if problem is not None:
            return name, f"cannot read {path}: {problem}"
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert, key, password=_no_passphrase)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            return "tls_key", f"{key} is not the key of the certificate in {cert}"
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cert)
        except ssl.SSLError:
            return "tls_cert", f"no PEM certificate in {cert}"
        return "tls_key", f"no unencrypted PEM private key in {key} (phasewatch has no passphrase to give)"
    except OSError as exc:
        return "tls_cert", f"cannot load the pair: {exc.strerror or exc}"
    return None


def _unreadable(path: str) -> str | None:
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return "not a regular file"
        os.close(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def _no_passphrase() -> bytes:
    return b""  # (an encrypted key then fails to load, and no terminal is asked for its passphrase)


def listeners_overlap(first: str, second: str) -> bool:
    """Whether two HOST:PORT listeners cannot both be bound (the same port, overlapping addresses)."""
    host_a, port_a = split_listen(first)
    host_b, port_b = split_listen(second)
    if port_a != port_b:
        return False
    if host_a == host_b:
        return True
    a, b = bound_address(host_a, port_a), bound_address(host_b, port_b)
    if a is None or b is None:
        return False  # a name that does not resolve here: its bind fails on its own, said at start
    any4, any6 = ipaddress.IPv4Address("0.0.0.0"), ipaddress.IPv6Address("::")  # ([::] takes IPv4 too)
    return a == b or any6 in (a, b) or (any4 in (a, b) and a.version == b.version)


def split_listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.removeprefix("[").removesuffix("]"), int(port)


def bound_address(host: str, port: int) -> Address | None:
    """The address a listener on `host` binds (getaddrinfo's first answer; an IPv4-mapped IPv6
    address as its IPv4 one); None when it does not resolve."""
    try:
        sockaddr = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4]
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
    except (OSError, UnicodeError, ValueError, IndexError):
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
