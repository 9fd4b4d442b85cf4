"""What phasewatch prints: the table and JSON of a judgement (render.py), a verdict's words
(verdict_lines.py), text that fits the terminal (fit.py), the man pages (manpages.py)."""
