"""The hand-written part of docs/performance.md: how to reproduce, and what the numbers mean."""

TEXT = """
## Reproduce

    make bench            # = bash scripts/bench.sh: apt fail2ban + strace, py-spy in .venv, then bench/run.py

`bench/run.py --quick --out DIR` is the short version CI runs (`tests/e2e/test_e2e_bench_smoke.py`).
"""
