#!/usr/bin/env python3
"""The pipeline's own cost of a catch-up, without the journal's: a unit's entries are read first
(the C reader's batches, as `replay --unit` reads them), then fed `--reps` times to fresh pipelines.

The shared machine's clock is noisy; an instruction count is not. Feeding twice and once under
callgrind, the difference is the cost of one feed, in instructions, the same from run to run to
within half a percent (docs/performance.md):

    for reps in 1 2; do
      valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$reps \\
        .venv/bin/python bench/feed_cost.py --directory DIR --unit bench-crash-300000.service \\
        --fraction 0.1 --reps $reps
    done
    grep -h '^summary:' /tmp/cg.1 /tmp/cg.2     # (2) - (1): one feed

`DIR`: a copy of a journal directory (the bench sandbox's `/var/log/journal/*`). Run with another
tree's daemon first on PYTHONPATH to count that tree's cost. Without valgrind it prints wall times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace

from phasewatch.pipeline import Pipeline

try:
    from phasewatch.config.load import Config
    from phasewatch.sources.journal.journal_source import UnitRecords
except ImportError:  # a tree from before the rooms by kind (08bff7a, the reference of issue 37)
    from phasewatch.sources.journal_source import UnitRecords  # type: ignore[no-redef]

    from phasewatch.config import Config  # type: ignore[no-redef]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--directory", required=True, help="a journal directory")
    parser.add_argument("--unit", required=True)
    parser.add_argument("--fraction", type=float, default=1.0, help="the first part of the batches only")
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args()
    config = replace(Config(unit=args.unit), crash_cause_wait=0.0)  # as replay judges a saved journal
    shape = Pipeline(config, default_year=2026).run_shape()
    batches = [list(batch) for batch in UnitRecords(args.unit, args.directory, None).batches(runs=shape)]
    batches = batches[:int(len(batches) * args.fraction)]
    times = []
    for _ in range(args.reps):
        pipeline = Pipeline(config, default_year=2026)
        started = time.perf_counter()
        for batch in batches:
            pipeline.feed_entries(batch, None)
        pipeline.flush(None)
        times.append(time.perf_counter() - started)
    entries = sum(len(e.messages) if hasattr(e, "messages") else 1 for batch in batches for e in batch)
    if times:
        print(f"{entries} entries in {len(batches)} batches; feed median {statistics.median(times):.3f} s,"
              f" min {min(times):.3f} s ({args.reps} reps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
