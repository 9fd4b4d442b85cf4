"""The operator's config: read safely (yaml_file.py), each section checked (parse_sections.py, group.py)
into frozen records (sections.py, load.py's Config), checked on this host (host.py, file_trust.py),
every error at once for check-config (all_errors.py); instances.py names the systemd instances."""
