#!/usr/bin/env python3
"""Runs inside the bench sandbox: the daemon's own catch-up, `Daemon.start` rebuilding a start-up
that began before the unit's first entry (so every entry of the unit is read: a daemon restarted
after weeks of serving), in-process, with the real journal and the daemon's JournalFollower; the
unit's facts and the sinks are the tests' recording ones (no D-Bus, no restarts). Prints what it
rebuilt as JSON. The reader is the C one unless PHASEWATCH_PURE_PYTHON=1.

    rebuild.py --unit U
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(os.path.dirname(HERE), "daemon")]

from phasewatch.clock import FakeClock  # noqa: E402
from phasewatch.compose import World, compose  # noqa: E402
from phasewatch.config.load import Config  # noqa: E402
from phasewatch.sinks.actions import RecordingAlerter, RecordingNotifier  # noqa: E402
from phasewatch.sinks.state.store import StateStore  # noqa: E402
from phasewatch.sources.host.procs import ProcessTable  # noqa: E402
from phasewatch.sources.journal.follow import JournalFollower  # noqa: E402
from phasewatch.sources.journal.journal_source import reader_name  # noqa: E402
from phasewatch.systemd_unit import RecordingUnit, UnitFacts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(prog="rebuild.py")
    parser.add_argument("--unit", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp)
        facts = UnitFacts("active", "running", "0" * 32, control_group=None, started_at=1_000_000_000.0)
        app = compose(Config(unit=args.unit), World(
            follower=JournalFollower(args.unit), unit=RecordingUnit(facts), alerter=RecordingAlerter(args.unit),
            notifier=RecordingNotifier(), store=StateStore(state, args.unit), clock=FakeClock(wall=4_000_000_000.0),
            processes=ProcessTable(proc=str(state / "proc"), cgroup_roots=(str(state / "cg"),))))
        app.start()
        print(json.dumps({"reader": reader_name(), "entries": app.pipeline.entries,
                          "invocations": len(app.pipeline.snapshot().invocations)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
