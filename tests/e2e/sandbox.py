"""A real systemd (PID 1 of a fresh PID + mount + network + cgroup namespace) for end-to-end tests.

Recipe (../shared/docs/FACTS.md): private mounts; fresh tmpfs on /run, /tmp and /var/log/journal
(never the host's); our own journald.conf, passwd/group (with the `phasewatch` system user) and
polkit rules bind-mounted; the checkout re-bound where the tmpfs would hide it; then
`/lib/systemd/systemd --system --unit=basic.target`. The cgroup namespace's root is a subtree of
its own in every hierarchy, and the hierarchies are mounted again inside, so the sandbox's systemd
manages that subtree only: two sandboxes on one machine never reach each other's units. Stopped
with `systemctl poweroff` inside; only processes this harness started are ever signalled, by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, NamedTuple

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = "/lib/systemd/systemd"
PHASEWATCH_UID = 987

INNER = r"""#!/bin/bash
set -euo pipefail
stage="$1"; repo="$2"
mount --make-rprivate /
ip link set lo up
# The cgroup hierarchies again, as this cgroup namespace sees them (its root is the sandbox's own
# subtree): the sandbox's systemd manages that subtree, never the host's /system.slice.
if [ -s "$stage/cgroup-mounts" ]; then
  umount -R /sys/fs/cgroup
  while read -r fstype options target; do
    mkdir -p "$target"
    mount -t "$fstype" -o "$options" "$fstype" "$target"
  done < "$stage/cgroup-mounts"
fi
# An ancestor of the checkout that other users cannot traverse (e.g. /root) is replaced by a tmpfs
# inside the sandbox, so the unprivileged phasewatch user can reach the venv. Found before /tmp
# and /run are replaced, for a checkout below either.
hidden=""
path="$repo"
while [ "$path" != "/" ]; do
  parent="$(dirname "$path")"
  if [ "$(( $(stat -c '%a' "$parent") & 1 ))" = "0" ]; then hidden="$parent"; fi
  path="$parent"
done
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p /run/keep-repo
mount --bind "$repo" /run/keep-repo
mount -t tmpfs -o mode=1777 tmpfs /tmp
if [ -n "$hidden" ]; then mount -t tmpfs -o mode=755 tmpfs "$hidden"; fi
mkdir -p "$repo"
mount --bind /run/keep-repo "$repo"
umount /run/keep-repo
mkdir -p /var/log/journal
mount -t tmpfs -o mode=2755 tmpfs /var/log/journal
mount --bind "$stage/journald.conf" /etc/systemd/journald.conf
mount --bind "$stage/passwd" /etc/passwd
mount --bind "$stage/group" /etc/group
mount --bind "$stage/polkit" /etc/polkit-1/rules.d
export container=phasewatch-e2e
exec /lib/systemd/systemd --system --unit=basic.target
"""


class SandboxError(RuntimeError):
    pass


class CgroupMount(NamedTuple):
    fstype: str  # cgroup (a v1 hierarchy), cgroup2 or the tmpfs that holds the v1 hierarchies
    options: str
    target: str


def cgroup_mounts() -> list[CgroupMount]:
    """The mounts at and below /sys/fs/cgroup, outermost first (a hybrid host: a tmpfs, then each
    hierarchy; a unified one: one cgroup2)."""
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        _source, target, fstype, options = line.split()[:4]
        if (target == "/sys/fs/cgroup" or target.startswith("/sys/fs/cgroup/")) and \
                fstype in ("cgroup", "cgroup2", "tmpfs"):
            # Mounted again read-write: the sandbox's systemd writes its own subtree (a host may
            # show the tmpfs that holds the v1 hierarchies read-only).
            writable = ",".join(["rw", *(o for o in options.split(",") if o not in ("ro", "rw"))])
            mounts.append(CgroupMount(fstype, writable, target))
    return sorted(mounts, key=lambda mount: mount.target.count("/"))


def own_cgroups(name: str) -> list[Path]:
    """A fresh subtree named NAME below our own cgroup in every hierarchy, so that two sandboxes on
    one machine (CI beside a development run) never manage each other's units."""
    made = []
    for mount in cgroup_mounts():
        if mount.fstype == "tmpfs":
            continue
        ours = _own_cgroup_path(mount)
        if ours is None:
            continue
        path = Path(mount.target) / ours.lstrip("/") / name
        path.mkdir()
        made.append(path)
        for inherited in ("cpuset.cpus", "cpuset.mems"):  # a v1 cpuset starts empty, refusing tasks
            if (path / inherited).exists() and not (path / inherited).read_text().strip():
                (path / inherited).write_text((path.parent / inherited).read_text())
    return made


def _own_cgroup_path(mount: CgroupMount) -> str | None:
    controllers = set(mount.options.split(",")) if mount.fstype == "cgroup" else set()
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, names, path = line.split(":", 2)
        if mount.fstype == "cgroup2" and names == "":
            return path
        if mount.fstype == "cgroup" and names and set(names.split(",")) <= controllers:
            return path
    return None


def remove_cgroups(paths: list[Path]) -> None:
    """The sandbox's subtrees, deepest first (a cgroup goes only once its processes are gone)."""
    for top in paths:
        if not top.exists():
            continue
        for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
            try:
                directory.rmdir()
            except OSError:
                pass
        try:
            top.rmdir()
        except OSError:
            pass


def can_boot() -> str | None:
    """None if a sandbox can be booted here, else the reason it cannot."""
    if os.geteuid() != 0:
        return "needs root (unshare of PID and mount namespaces, systemd as PID 1)"
    for tool in ("unshare", "nsenter", "ip", "setpriv"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if not os.path.exists(SYSTEMD):
        return f"{SYSTEMD} is missing"
    if not os.path.exists("/usr/share/polkit-1") and not shutil.which("pkaction"):
        return "polkitd is not installed (apt-get install polkitd)"
    return None


class Sandbox:
    inner_script = INNER  # run as PID 1 of the namespaces until it execs systemd (a subclass may change it)

    def __init__(self, netns: str | None = None) -> None:
        # netns: a network namespace the test made (`ip netns add NAME`: a veth to another sandbox),
        # entered instead of a fresh one (nsenter --net: nothing else of ip-netns-exec's mounts)
        self.netns = netns
        self.stage = Path(tempfile.mkdtemp(prefix="phasewatch-e2e-", dir="/var/tmp"))
        self.process: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None  # host PID of the sandbox's PID 1
        self.cgroups: list[Path] = []  # the sandbox's own subtree in each cgroup hierarchy

    # -- life cycle ------------------------------------------------------------------------------
    def boot(self, timeout: float = 90.0) -> None:
        self._stage_files()
        script = self.stage / "inner.sh"
        script.write_text(self.inner_script)
        script.chmod(0o755)
        self.cgroups = own_cgroups(self.stage.name)
        (self.stage / "cgroup-mounts").write_text("".join(f"{m.fstype} {m.options} {m.target}\n"
                                                          for m in cgroup_mounts()))
        # The unshare joins the sandbox's own subtree of every hierarchy before it makes the cgroup
        # namespace whose root that subtree is.
        join = "".join(f'echo $$ > "{path}/cgroup.procs"; ' for path in self.cgroups)
        with open(self.stage / "boot.log", "wb") as log:
            self.process = subprocess.Popen(
                ["sh", "-c", join + 'exec "$@"', "sh", *self._network(), "--cgroup", "--pid", "--mount", "--fork",
                 "--mount-proc", str(script), str(self.stage), str(REPO)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pid = self._child_pid()
            if self.pid is not None:
                state = subprocess.run(["nsenter", "-t", str(self.pid), "-a", "systemctl", "is-system-running"],
                                       capture_output=True, text=True).stdout.strip()
                if state in ("running", "degraded"):
                    return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        boot_log = (self.stage / "boot.log").read_text(errors="replace")[-2000:]
        self.shutdown()
        raise SandboxError(f"the sandbox systemd did not come up: {boot_log}")

    def _network(self) -> list[str]:
        """The unshare command line's start: a fresh network namespace, or the test's own one."""
        if self.netns is None:
            return ["unshare", "--net"]
        return ["nsenter", f"--net=/run/netns/{self.netns}", "unshare"]

    def _child_pid(self) -> int | None:
        assert self.process is not None
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            return None
        for child in children:
            try:
                if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                    return int(child)
            except OSError:
                continue
        return None

    def shutdown(self) -> None:
        if self.process is None:
            return
        if self.pid is not None and self.process.poll() is None:
            subprocess.run(["nsenter", "-t", str(self.pid), "-a", "systemctl", "poweroff", "--no-block"],
                           capture_output=True, timeout=30)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)  # our own systemd: the namespace dies with it
                try:
                    self.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.process.kill()  # the unshare we started
                    self.process.wait(timeout=30)
        elif self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        self.process = None
        remove_cgroups(self.cgroups)
        shutil.rmtree(self.stage, ignore_errors=True)

    def _stage_files(self) -> None:
        (self.stage / "journald.conf").write_text(
            "[Journal]\nStorage=persistent\nRateLimitBurst=0\nSystemMaxUse=64M\n")
        passwd = Path("/etc/passwd").read_text()
        group_lines = Path("/etc/group").read_text().splitlines()
        passwd += f"phasewatch:x:{PHASEWATCH_UID}:{PHASEWATCH_UID}:phasewatch:/var/lib/phasewatch:/usr/sbin/nologin\n"
        groups = []
        for line in group_lines:
            if line.startswith("systemd-journal:"):
                members = line.split(":")[3]
                line = line + ("," if members else "") + "phasewatch"
            groups.append(line)
        groups.append(f"phasewatch:x:{PHASEWATCH_UID}:")
        (self.stage / "passwd").write_text(passwd)
        (self.stage / "group").write_text("\n".join(groups) + "\n")
        polkit = self.stage / "polkit"
        polkit.mkdir()
        rule = REPO / "units" / "polkit" / "50-phasewatch.rules"
        if rule.exists():
            shutil.copy(rule, polkit / rule.name)
        os.chmod(self.stage, 0o755)

    # -- inside --------------------------------------------------------------------------------
    def run(self, *args: str, check: bool = True, user: str | None = None, timeout: float = 60,
            input: bytes | None = None) -> subprocess.CompletedProcess[str]:
        assert self.pid is not None
        command = ["nsenter", "-t", str(self.pid), "-a"]
        if user is not None:
            command += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]
        result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout,
                                input=input.decode() if input is not None else None)
        if check and result.returncode != 0:
            raise SandboxError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def systemctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("systemctl", *args, check=check)

    def write(self, path: str, text: str) -> None:
        self.run("sh", "-c", f"mkdir -p \"$(dirname {path})\" && cat > {path}", input=text.encode())

    def read(self, path: str) -> str | None:
        result = self.run("cat", path, check=False)
        return result.stdout if result.returncode == 0 else None

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        out = self.systemctl("show", unit, "-p", ",".join(properties)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, *matches: str) -> list[dict[str, Any]]:
        out = self.run("journalctl", "-o", "json", "--all", "--no-pager", *matches, check=False).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def wait_for(self, predicate: Any, timeout: float, what: str, interval: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(interval)
