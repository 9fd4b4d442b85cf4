#!/usr/bin/env bash
# The performance bench (issue 5, docs/performance.md), as root: installs what it needs (scripts/setup.sh,
# then fail2ban and strace from apt, py-spy into .venv), then runs bench/run.py inside a throwaway
# systemd (tests/e2e/sandbox.py). Writes bench/results.json and docs/performance.md.
# Arguments go to bench/run.py: --quick (small N, one run: what CI does), --out DIR, --only PARTS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
missing=()
for p in fail2ban strace; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "bench: apt-get install ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
.venv/bin/python -m pip install -q py-spy
exec .venv/bin/python bench/run.py "$@"
