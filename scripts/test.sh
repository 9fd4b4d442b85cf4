#!/usr/bin/env bash
# Run every test (and the linters) after installing what they need.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check daemon tests
.venv/bin/mypy
.venv/bin/python -m pytest -q "$@"
