"""Stage 5, act: verdicts -> actions (respond.py: alert, restart within the budget, hold), a group's
one restart (group_decision.py), and the words a verdict is told in (output/verdict_lines.py)."""
