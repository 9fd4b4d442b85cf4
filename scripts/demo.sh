#!/usr/bin/env bash
# The main job: phasewatch judging simulated start-ups of sglang-kimi.service
# (Kimi-K2.5 INT4, TP=8, EAGLE-3), as the daemon will, from bundled journal exports.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
pw=.venv/bin/phasewatch

echo "== 1. A healthy start-up, judged at its last line"
$pw replay examples/sglang-kimi-healthy.json
echo "== 2. TP3 hangs in the draft model's CUDA graph capture; judged 25 minutes after the last line"
$pw replay --config config/phasewatch.yaml --now +25m examples/sglang-kimi-stall-draft-capture.json
echo "== 3. TP5 runs out of memory in CUDA graph capture (the parent's SIGQUIT line comes first)"
$pw replay --config config/phasewatch.yaml examples/sglang-kimi-crash-oom-capture.json
echo "== 4. The same stall as JSON (first rank only)"
$pw replay --json --now +25m examples/sglang-kimi-stall-draft-capture.json | head -40
