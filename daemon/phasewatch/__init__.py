"""phasewatch: a phase-aware start-up watchdog for LLM inference servers under systemd."""

__version__ = "0.1.0"
