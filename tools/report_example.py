"""Draw `phasewatch report --plot` of three simulated start-ups at real speed into docs/images/ (the
picture in the README): a healthy one, one whose TP3 hangs in the draft model's CUDA graph capture
(stalled at the phase's 20-minute deadline), and one whose eight ranks all hang in weight loading.

    .venv/bin/python tools/report_example.py [OUT.svg]   # default docs/images/report-example.svg
    rsvg-convert docs/images/report-example.svg -o docs/images/report-example.png   # apt: librsvg2-bin
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tools"), str(REPO / "daemon")]

from sglang_sim import Faults, build, journal_json  # noqa: E402

from phasewatch.commands.report import to_svg  # noqa: E402
from phasewatch.config.load import Config  # noqa: E402
from phasewatch.pipeline import Pipeline  # noqa: E402
from phasewatch.records import record_from_fields  # noqa: E402
from phasewatch.sinks.history import StartupRecord, summarize  # noqa: E402
from phasewatch.stages.s4_judge.policy import outcome  # noqa: E402

UNIT = "sglang-kimi.service"
BASE = 1_796_025_600.0  # 2026-11-30 08:00 UTC


def startup(n: int, faults: Faults) -> StartupRecord:
    """The start-up as the daemon records it: judged every 5 s from its last line until a verdict
    (at most 2 h), or at its last line when it reached ready."""
    pipeline = Pipeline(Config(unit=UNIT))
    for entry in journal_json(build(1.0, faults), base=BASE + n * 3600, unit=UNIT, invocation=f"{n:032x}"):
        pipeline.feed(record_from_fields(entry), None)
    pipeline.flush(None)
    inv = pipeline.snapshot().current
    assert inv is not None and inv.last_ts is not None
    now = inv.last_ts
    [judgement] = pipeline.judge(now)
    while inv.state.value == "starting" and not judgement.verdicts and now < inv.last_ts + 7200:
        now += 5.0
        [judgement] = pipeline.judge(now)
    verdicts = [(v.kind, v.rank, v.phase, v.at) for v in judgement.verdicts]
    cause = next((v.cause for v in judgement.verdicts), None)
    record = summarize(UNIT, inv, outcome(inv, judgement.verdicts), cause, now, verdicts)
    assert record is not None
    return record


def main(argv: list[str]) -> int:
    records = [
        startup(0, Faults()),
        startup(1, Faults(hang={3: "draft_cuda_graph_capture"})),
        startup(2, Faults(hang={rank: "weight_load" for rank in range(8)})),
    ]
    out = Path(argv[0]) if argv else REPO / "docs" / "images" / "report-example.svg"
    out.write_text(to_svg(records, f"{UNIT}: the last {len(records)} start-up(s)"))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
