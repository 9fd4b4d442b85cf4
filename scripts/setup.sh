#!/usr/bin/env bash
# Install what phasewatch needs on Debian 12 (as root): build headers for systemd-python and
# pystemd, journal tools for the tests, then a venv in .venv with the package and its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(libsystemd-dev pkg-config gcc python3-dev python3-venv systemd-journal-remote polkitd dbus iproute2 util-linux
          prometheus curl  # prometheus: promtool and the e2e Prometheus; curl: queries inside the sandbox
          prometheus-alertmanager  # amtool and the e2e Alertmanager of the group restart (tests/e2e/test_e2e_group.py)
          librsvg2-bin  # rsvg-convert: the README picture is checked against what the code draws
          fail2ban strace  # the bench's smoke test (tests/e2e/test_e2e_bench_smoke.py): row (c), wake-up counts
          # the Debian package (make deb, tests/e2e/test_e2e_deb.py): Debian's own runtime packages,
          # which the .deb depends on and is tested with, and the tools that build it
          python3-systemd python3-pystemd python3-httpx python3-prometheus-client python3-yaml
          python3-pytest python3-hypothesis
          dpkg-dev debhelper dh-python pybuild-plugin-pyproject python3-all python3-setuptools)
missing=()
for p in "${packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Debian's own interpreter: the daemon runs as an unprivileged user in the tests, and must be able
# to read it (a python under /root would not do).
python="${PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}"
if [ -x .venv/bin/python ] && ! grep -q "^home = $(dirname "$(readlink -f "$python")")\$" .venv/pyvenv.cfg; then
  rm -rf .venv  # made with another interpreter
fi
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test,evidence]'
