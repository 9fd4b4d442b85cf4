"""Stage 4, judge: snapshot + now -> verdicts (policy.py, verdict.py): phase limits, GPU signs of life
(vitals.py, gpu_vitals.py, gpu_policy.py, vitals_trace.py), a node waiting for its group
(group_wait.py), learned limits (learn.py), the unit's timers (timerlint.py, init_config.py), a
remedy per verdict (remedies.py), and when to look again (wakeups.py)."""
