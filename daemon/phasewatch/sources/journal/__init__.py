"""Sources that read the unit's journal (live, caught up, copied, pasted) and what says which of its
entries are the unit's own (trust.py) and whether this user can read it (access.py)."""
