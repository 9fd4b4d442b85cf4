"""Alertmanager's webhook, received: the group's restart decisions come in here (alert_receiver.py),
over a bounded HTTP listener (receiver_http.py, receiver_gate.py, listen_fds.py)."""
