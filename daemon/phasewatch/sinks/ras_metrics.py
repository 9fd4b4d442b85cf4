"""Metrics of NCCL RAS's last answer for the current start-up (sources/ras.py). Pure over the finding:

    phasewatch_ras_collective_lag{unit, rank, collective}   operations of the collective the rank has
                                                            launched fewer than the furthest rank
    phasewatch_ras_culprit{unit, rank, collective}          1 for each rank RAS's answer names as culprit
    phasewatch_ras_ignored_pids{unit}                       PIDs in the answer outside the unit (ignored)
"""

from __future__ import annotations

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from ..stages.s4_judge.ras_culprit import RasFinding


def ras_families(finding: RasFinding | None, unit: str) -> list[Metric]:
    lag = GaugeMetricFamily("phasewatch_ras_collective_lag", "Operations of the collective the rank has launched "
                            "fewer than the furthest rank of its communicator, in NCCL RAS's last answer (collectives "
                            "inside CUDA graphs are not counted)", labels=["unit", "rank", "collective"])
    culprit = GaugeMetricFamily("phasewatch_ras_culprit", "1 for each rank NCCL RAS's last answer names as the one a "
                                "collective waits for (collective 'none': RAS has no data from it)",
                                labels=["unit", "rank", "collective"])
    ignored = GaugeMetricFamily("phasewatch_ras_ignored_pids", "PIDs in NCCL RAS's last answer that are not the "
                                "unit's processes (ignored: another job on the port, or an impostor)", labels=["unit"])
    if finding is not None:
        seen: dict[tuple[str, str], int] = {}
        for rank, collective, behind in finding.lags:
            seen[(rank, collective)] = max(seen.get((rank, collective), 0), behind)
        for (rank, collective), behind in seen.items():
            lag.add_metric([unit, rank, collective], float(behind))
        for name in dict.fromkeys((c.label, c.collective or "none") for c in finding.culprits):
            culprit.add_metric([unit, *name], 1.0)
        ignored.add_metric([unit], float(len(finding.ignored_pids)))
    return [lag, culprit, ignored]
