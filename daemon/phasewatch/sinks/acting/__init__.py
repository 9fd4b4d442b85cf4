"""Sinks that act: the actor (alerts, restarts, their memory), the action worker, the group's restarts."""
