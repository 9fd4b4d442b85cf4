#!/usr/bin/env bash
# The main job: a throwaway systemd with a simulated sglang-kimi.service (Kimi-K2.5 INT4, TP=8,
# EAGLE-3) whose TP3 hangs in the draft model's CUDA graph capture, and phasewatch watching it;
# then phasewatch replaying bundled journal exports of three start-ups. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pw=.venv/bin/phasewatch

echo "######## 1. Live: phasewatch under a real systemd (its own PID/mount/network namespaces)"
.venv/bin/python tools/demo.py

echo "######## 2. Replay of bundled journal exports"
echo "== A healthy start-up, judged at its last line"
$pw replay examples/sglang-kimi-healthy.json
echo "== TP3 hangs in the draft model's CUDA graph capture; judged 25 minutes after the last line"
$pw replay --config config/phasewatch.yaml --now +25m examples/sglang-kimi-stall-draft-capture.json
echo "== TP5 runs out of memory in CUDA graph capture (the parent's SIGQUIT line comes first)"
$pw replay --config config/phasewatch.yaml examples/sglang-kimi-crash-oom-capture.json
