"""Stage 3, track: events -> each start-up's per-rank phase state (tracker.py, tracker_state.py),
frozen into the views every later stage reads (snapshot.py); JIT spans (jit.py), lock-step peers
(lockstep.py), and the catch-up's fast path over runs of alike lines (fastpath.py)."""
