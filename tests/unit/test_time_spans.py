"""systemd time spans (`45min`, `1h 30min`, `2h30m`, `1d 2h`) are accepted wherever phasewatch takes a
duration: the config's limits, `logs --since SPAN`; `replay --now +SPAN` and `wait-ready --timeout SPAN`
over journal files in tests/integration/test_time_spans_journal.py."""

from __future__ import annotations

import pytest

from phasewatch.commands.logs import parse_since
from phasewatch.config.load import parse_config
from phasewatch.records import Phase

UNIT = "sglang-kimi.service"


def test_config_limits_take_systemd_time_spans() -> None:
    config = parse_config(f"""unit: {UNIT}
phases:
  weight_load: {{deadline: 1h 30min, stall: 45min}}
  cuda_graph_capture: {{deadline: 2h30m, stall: 90 s}}
restart_budget: {{max: 3, window: 1d 2h, backoff: 5 min}}
""", "/etc/phasewatch/x.yaml")
    assert (config.limits(Phase.WEIGHT_LOAD).deadline, config.limits(Phase.WEIGHT_LOAD).stall) == (5400.0, 2700.0)
    assert (config.limits(Phase.CUDA_GRAPH_CAPTURE).deadline, config.limits(Phase.CUDA_GRAPH_CAPTURE).stall) == (
        9000.0, 90.0)
    assert (config.restart_budget.window, config.restart_budget.backoff) == (93600.0, 300.0)


def test_a_bad_span_in_the_config_names_key_and_line() -> None:
    with pytest.raises(Exception, match=r"phases\.weight_load\.deadline.*1h 30 fortnights.*line 3"):
        parse_config(f"unit: {UNIT}\nphases:\n  weight_load: {{deadline: 1h 30 fortnights}}\n", "/etc/x.yaml")


def test_logs_since_takes_a_span_ago() -> None:
    assert parse_since("45min", now=10_000.0) == 10_000.0 - 2700
    assert parse_since("1h 30min", now=10_000.0) == 10_000.0 - 5400
