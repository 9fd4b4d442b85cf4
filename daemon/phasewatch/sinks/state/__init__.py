"""Sinks that keep state: the history of start-ups, the host's writable state, systemd's status."""
