"""Stage 2, interpret: lines -> events through the profile's rules (events.py); what a traceback or
a fatal line says of its cause, phase and ranks (crashfacts.py); the order phases come in
(phaseorder.py); how many lines each rule matched (ruletally.py)."""
