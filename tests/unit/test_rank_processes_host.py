"""Rank processes of a container-wrapped unit: its cgroup holds only the client (`docker run`), the
ranks run elsewhere. With `rank_processes: host` they are found by title anywhere in /proc; without,
never (another server's ranks on the same host are not ours)."""

from __future__ import annotations

from pathlib import Path

from phasewatch.config import load_config
from phasewatch.sources.procs import ProcessTable, RankProcess

CGROUP = "/system.slice/sglang-kimi.service"


def tree(tmp_path: Path, unit_pids: dict[int, str], other_pids: dict[int, str]) -> ProcessTable:
    for pid, title in {**unit_pids, **other_pids}.items():
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "cmdline").write_bytes(title.encode() + b"\0--flag\0")
    (tmp_path / "proc" / "self").mkdir()
    group = tmp_path / "cg" / CGROUP.lstrip("/")
    group.mkdir(parents=True)
    (group / "cgroup.procs").write_text("".join(f"{pid}\n" for pid in unit_pids))
    return ProcessTable(proc=str(tmp_path / "proc"), cgroup_roots=(str(tmp_path / "cg"),))


RANKS_ELSEWHERE = {300: "sglang::scheduler_TP0", 301: "sglang::scheduler_TP1", 302: "/usr/bin/containerd-shim"}


def test_a_container_clients_cgroup_has_no_ranks_and_the_cgroup_mode_finds_none(tmp_path: Path) -> None:
    table = tree(tmp_path, {100: "/usr/bin/docker"}, RANKS_ELSEWHERE)
    assert table.ranks(CGROUP) == []


def test_host_mode_finds_rank_titles_outside_the_cgroup(tmp_path: Path) -> None:
    table = tree(tmp_path, {100: "/usr/bin/docker"}, RANKS_ELSEWHERE)
    assert table.ranks(CGROUP, host_wide=True) == [RankProcess("TP0", 300), RankProcess("TP1", 301)]


def test_host_mode_prefers_the_cgroup_when_it_holds_ranks(tmp_path: Path) -> None:
    table = tree(tmp_path, {100: "python3", 101: "sglang::scheduler_TP0"}, {300: "sglang::scheduler_TP0"})
    assert table.ranks(CGROUP, host_wide=True) == [RankProcess("TP0", 101)]


def test_rank_processes_setting_defaults_to_cgroup_and_takes_host(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("unit: sglang-kimi.service\n")
    assert load_config(str(path)).rank_processes == "cgroup"
    path.write_text("unit: sglang-kimi.service\nrank_processes: host\n")
    assert load_config(str(path)).rank_processes == "host"
