"""Sinks that publish: the metrics exporter's step."""
