"""The C part of the package: phasewatch._journal_lines, the catch-up reader of `replay --unit`
(daemon/phasewatch/_journal_lines.c, built against libsystemd found by pkg-config). Everything
else is in pyproject.toml.

PHASEWATCH_PURE_PYTHON=1 builds without it (the Debian package does: it is `Architecture: all`);
so does a machine without pkg-config or libsystemd's headers, with a warning. Without it,
journal_source reads with systemd-python, the same entries only slower (`phasewatch --version` says
which reader is in use).
"""

import os
import subprocess
import sys

from setuptools import Extension, setup


def pkg_config(*args: str) -> list[str] | None:
    try:
        done = subprocess.run(["pkg-config", *args, "libsystemd"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return done.stdout.split()


def extensions() -> list[Extension]:
    if os.environ.get("PHASEWATCH_PURE_PYTHON"):
        return []
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
    if cflags is None or libs is None:
        print("phasewatch: pkg-config finds no libsystemd: building without the C journal reader", file=sys.stderr)
        return []
    return [Extension("phasewatch._journal_lines", ["daemon/phasewatch/_journal_lines.c"],
                      extra_compile_args=[*cflags, "-O2", "-Wall", "-Werror=implicit-function-declaration"],
                      extra_link_args=libs)]


setup(ext_modules=extensions())
