"""Rank processes of a container-wrapped unit: its cgroup holds only the client (`docker run`), the
ranks run elsewhere. With `rank_processes: host` they are found by title anywhere in /proc; without,
never (another server's ranks on the same host are not ours)."""

from __future__ import annotations

from pathlib import Path

from phasewatch.config.load import load_config
from phasewatch.sources.host.procs import ProcessTable, RankProcess

CGROUP = "/system.slice/sglang-kimi.service"


BOOT = 1_800_000_000  # /proc/stat's btime
START = BOOT + 1000.0  # the start-up began 1000 s after boot: 100000 ticks at 100 Hz


def tree(tmp_path: Path, unit_pids: dict[int, str], other_pids: dict[int, str],
         who: dict[int, tuple[int, int]] | None = None) -> ProcessTable:
    """`who`: pid -> (uid, start in ticks); others are root's, begun after the start-up."""
    for pid, title in {**unit_pids, **other_pids}.items():
        uid, started = (who or {}).get(pid, (0, 100_500))
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "cmdline").write_bytes(title.encode() + b"\0--flag\0")
        (tmp_path / "proc" / str(pid) / "stat").write_text(f"{pid} (x) S {' '.join(['0'] * 18)} {started} 0\n")
        (tmp_path / "proc" / str(pid) / "status").write_text(f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\n")
    (tmp_path / "proc" / "self").mkdir()
    (tmp_path / "proc" / "stat").write_text(f"cpu  1 2 3\nbtime {BOOT}\nprocesses 10\n")
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
    assert table.ranks(CGROUP, host_wide=True, since=START) == [RankProcess("TP0", 300), RankProcess("TP1", 301)]


def test_host_mode_prefers_the_cgroup_when_it_holds_ranks(tmp_path: Path) -> None:
    table = tree(tmp_path, {100: "python3", 101: "sglang::scheduler_TP0"}, {300: "sglang::scheduler_TP0"})
    assert table.ranks(CGROUP, host_wide=True, since=START) == [RankProcess("TP0", 101)]


def test_rank_processes_setting_defaults_to_cgroup_and_takes_host(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("unit: sglang-kimi.service\n")
    assert load_config(str(path)).rank_processes == "cgroup"
    path.write_text("unit: sglang-kimi.service\nrank_processes: host\n")
    assert load_config(str(path)).rank_processes == "host"


def test_probe_c3_host_mode_believes_only_the_units_users_processes_begun_after_the_start(tmp_path: Path) -> None:
    """PROBE-S3 C-3: uid 65534's `exec -a sglang::scheduler_TP3 sleep 900` was watched as TP3, and its
    death restarted a healthy start-up. Believed: the unit's User= (987, its client's uid) or root (a
    container runtime), begun after the start-up, the only process with its title."""
    others = {300: "sglang::scheduler_TP0", 301: "sglang::scheduler_TP1", 302: "sglang::scheduler_TP3",
              303: "sglang::scheduler_TP4", 304: "sglang::scheduler_TP5", 305: "sglang::scheduler_TP5",
              306: "sglang::scheduler_TP6"}
    who = {100: (987, 100_100), 300: (987, 100_300), 301: (0, 100_300), 302: (65534, 100_300),
           303: (987, 50_000), 304: (987, 100_300), 305: (987, 100_301), 306: (987, 100_300)}
    table = tree(tmp_path, {100: "/usr/bin/podman"}, others, who)
    assert table.ranks(CGROUP, host_wide=True, since=START) == [
        RankProcess("TP0", 300), RankProcess("TP1", 301), RankProcess("TP6", 306)]
    assert table.ranks(CGROUP, host_wide=True) == []  # the start-up's start unknown: nobody is believed

