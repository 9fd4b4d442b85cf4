"""Stage 1, read: journal records -> logical log lines (lines.py), with their times (timestamps.py).
Where a record's prefix is and what it names is the engine's grammar (phasewatch/engines/)."""
