"""The pure stages, in the order a journal entry flows through them (docs/architecture.md):

1. s1_read: journal records -> logical lines (prefixes by the engine's grammar, times, tqdm frames);
2. s2_interpret: lines -> events, through the engine profile's rules (and what a traceback says);
3. s3_track: events -> each start-up's per-rank phase state, frozen into a Snapshot;
4. s4_judge: snapshot + now -> verdicts (deadlines, stalls, crashes, GPU signs, remedies);
5. s5_act: verdicts -> actions (alert, restart, hold) and the words they are told in.

No stage does I/O or reads a clock: `now` is passed in. A stage imports only its own group and the
groups before it, and nothing above the stages (tests/unit/test_layers.py).
"""
