"""Instance names: phasewatch@sglang-kimi.service watches sglang-kimi.service; the older long form and
either config spelling keep working."""

from __future__ import annotations

from phasewatch.commands.run import instance_config
from phasewatch.config.instances import (
    config_names,
    instance_of,
    other_spelling,
    watched_unit,
    watcher_names,
    watcher_of,
)


def test_the_instance_is_the_unit_without_its_suffix() -> None:
    assert instance_of("sglang-kimi.service") == "sglang-kimi"
    assert watcher_of("sglang-kimi.service") == watcher_of("sglang-kimi") == "phasewatch@sglang-kimi.service"
    assert watcher_names("sglang-kimi") == ("phasewatch@sglang-kimi.service", "phasewatch@sglang-kimi.service.service")
    assert watched_unit("sglang-kimi") == watched_unit("sglang-kimi.service") == "sglang-kimi.service"
    assert instance_of("batch.scope") == "batch.scope"  # only .service is implied


def test_config_names_short_first_then_long() -> None:
    assert config_names("sglang-kimi") == ("sglang-kimi.yaml", "sglang-kimi.service.yaml")
    assert other_spelling("/etc/phasewatch/sglang-kimi.yaml") == "/etc/phasewatch/sglang-kimi.service.yaml"
    assert other_spelling("/etc/phasewatch/sglang-kimi.service.yaml") == "/etc/phasewatch/sglang-kimi.yaml"
    assert other_spelling("/etc/phasewatch/x.json") is None
    assert other_spelling("/etc/phasewatch/.service.yaml") is None


def test_the_daemon_reads_the_other_spelling_only_when_its_own_is_missing() -> None:
    short, long = "/etc/phasewatch/sglang-kimi.yaml", "/etc/phasewatch/sglang-kimi.service.yaml"
    assert instance_config(short, exists=lambda p: True) == short
    assert instance_config(short, exists=lambda p: p == long) == long  # an older install, new instance name
    assert instance_config(long, exists=lambda p: p == short) == short  # the old instance name, init's file
    assert instance_config(short, exists=lambda p: False) == short  # neither: the error names the one asked for
