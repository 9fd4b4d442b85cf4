"""The Debian package, installed into a throwaway systemd: `make deb`, then `apt-get install ./…deb`
inside a sandbox whose /usr, /etc and /var/{lib,cache,log} are overlays on a tmpfs (the host's files
are the lower layer and are never written), then the operator's steps from the README, and the
hung start-up restarted by the packaged daemon on Debian's python3 and python3-* packages, no venv.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_env import INSTANCE, UNIT, WATCHER
from sandbox import INNER, REPO, Sandbox

# The host's system directories as read-only lower layers; every write (dpkg's database, the user
# systemd-sysusers adds, the package's files) lands in a tmpfs that lives as long as the namespace.
OVERLAYS = ("/usr", "/etc", "/var/lib", "/var/cache", "/var/log")
OVERLAY_MOUNTS = r"""
mount -t tmpfs -o mode=700 tmpfs "$stage/overlay"
for dir in """ + " ".join(OVERLAYS) + r"""; do
  layer="$stage/overlay/$(echo "$dir" | tr / _)"
  mkdir -p "$layer/upper" "$layer/work"
  mount -t overlay overlay -o "lowerdir=$dir,upperdir=$layer/upper,workdir=$layer/work" "$dir"
done
"""
# Sandbox's recipe with the overlays first, and no staged passwd, group nor polkit rules: the
# package's postinst makes the user, the test copies the rule as an operator would.
PACKAGE_INNER = (INNER.replace('mount -t tmpfs -o mode=755 tmpfs /run\n',
                               'mount -t tmpfs -o mode=755 tmpfs /run\n' + OVERLAY_MOUNTS)
                 .replace('mount --bind "$stage/passwd" /etc/passwd\n', "")
                 .replace('mount --bind "$stage/group" /etc/group\n', "")
                 .replace('mount --bind "$stage/polkit" /etc/polkit-1/rules.d\n', ""))
assert PACKAGE_INNER.count("mount -t overlay") == 1 and "/etc/passwd" not in PACKAGE_INNER

# Debian 13 (systemd 257, Python 3.13): a root made by mmdebstrap from Debian's archive, cached
# (scripts/debian-root.sh), booted as the sandbox's PID 1 on an overlay (its tmpfs takes every
# write; the cached root is never changed). The cgroup steps of the recipe come first, as in
# Debian 12's; the checkout and the stage are bound at their own paths inside the new root.
ROOTS = {"debian-13": Path("/var/cache/phasewatch-e2e/trixie")}
PIVOT = r"""
mount -t tmpfs -o mode=700 tmpfs "$stage/overlay"
mkdir -p "$stage/overlay/upper" "$stage/overlay/work" "$stage/overlay/root"
new="$stage/overlay/root"
mount -t overlay overlay -o "lowerdir=$os_root,upperdir=$stage/overlay/upper,workdir=$stage/overlay/work" "$new"
mount -t proc proc "$new/proc"
mount --rbind /sys "$new/sys"
mount --rbind /dev "$new/dev"
mkdir -p "$new$stage" "$new$repo" "$new/oldroot"
mount --bind "$stage" "$new$stage"
mount --bind "$repo" "$new$repo"
cd "$new"
pivot_root . oldroot
mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /var/log/journal
mount -t tmpfs -o mode=2755 tmpfs /var/log/journal
# A checkout below /tmp or /run (CI's clean clone) is bound again over the fresh tmpfs.
mkdir -p "$repo"
mount --bind "/oldroot$repo" "$repo"
umount -l /oldroot
mount --bind "$stage/journald.conf" /etc/systemd/journald.conf
export container=phasewatch-e2e
# systemd 257 runs on the legacy cgroup hierarchies of a Debian 12 host only when asked to; in a
# container it reads its own command line as the kernel's.
exec /lib/systemd/systemd --system --unit=basic.target SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1
"""
ROOT_INNER = INNER.split("mount -t tmpfs -o mode=755 tmpfs /run\n", 1)[0].replace(
    'stage="$1"; repo="$2"', 'stage="$1"; repo="$2"; os_root="$3"') + PIVOT
assert ROOT_INNER.count("pivot_root") == 1 and "cgroup-mounts" in ROOT_INNER

STATE = "/var/lib/phasewatch"
CONFIG = f"/etc/phasewatch/{INSTANCE}.yaml"
STALLED_ID = "8d4c3f6b2a1e4e0f9b7d5c3a1f2e4d60"  # the catalog entry of "stalled"


class PackageSandbox(Sandbox):
    inner_script = PACKAGE_INNER
    host_status_before = ""  # the host's own dpkg status of phasewatch, before the sandbox installed it
    os_root: Path | None = None  # another Debian's root (ROOTS) instead of the host's own

    def boot(self, timeout: float = 90.0) -> None:
        if self.os_root is not None:
            self.inner_script = ROOT_INNER.replace('os_root="$3"', f'os_root="{self.os_root}"')
        super().boot(timeout)

    def _stage_files(self) -> None:
        super()._stage_files()
        # journald's own rate limit (10,000 lines per 30 s, scaled by free space), not lifted host-wide:
        # the package's way is the server unit's LogRateLimitBurst=.
        (self.stage / "journald.conf").write_text("[Journal]\nStorage=persistent\nSystemMaxUse=512M\n")
        (self.stage / "overlay").mkdir()
        # The simulator runs with Debian's python3 from the stage (stdlib only): nothing inside the
        # sandbox needs the checkout nor its venv.
        shutil.copy(REPO / "tools" / "sglang_sim.py", self.stage / "sglang_sim.py")


def version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return line.split('"')[1]
    raise AssertionError("no version in pyproject.toml")


@pytest.fixture(scope="module")
def deb() -> Path:
    """`make deb` from this checkout (it apt-installs its build dependencies, which include the
    runtime python3-* packages, and runs the unit and golden tests on them)."""
    built = subprocess.run(["make", "-C", str(REPO), "deb"], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    path = REPO / "dist" / f"phasewatch_{version()}_all.deb"
    assert path.is_file()
    return path


def debian_root(name: str) -> Path:
    """The cached root of `name` (ROOTS), made by scripts/debian-root.sh if it is not there yet."""
    root = ROOTS[name]
    made = subprocess.run(["bash", str(REPO / "scripts" / "debian-root.sh"), name.removeprefix("debian-"),
                           str(root)], capture_output=True, text=True, timeout=1800)
    assert made.returncode == 0, made.stdout[-3000:] + made.stderr[-3000:]
    return root


@pytest.fixture(scope="module", params=["debian-12", "debian-13"])
def box(deb: Path, request: pytest.FixtureRequest) -> Iterator[PackageSandbox]:
    sandbox = PackageSandbox()
    if request.param != "debian-12":
        sandbox.os_root = debian_root(request.param)
    sandbox.host_status_before = host_package_status()
    try:
        sandbox.boot()
        shutil.copy(deb, sandbox.stage / deb.name)
        sandbox.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y",
                    f"{sandbox.stage}/{deb.name}", timeout=300)
        yield sandbox
    finally:
        sandbox.shutdown()


def host_package_status() -> str:
    return subprocess.run(["dpkg-query", "-W", "-f", "${Status} ${Version}", "phasewatch"],
                          capture_output=True, text=True).stdout


# The server the Quick start watches: `python3 -m sglang.launch_server` with a real TP=8 EAGLE-3
# server's arguments (init reads them over D-Bus), the module being the simulator (1/100 of real time).
LAUNCH_SERVER = """import runpy, sys
sys.argv = ["sglang_sim", "run", "--scale", "0.01", "--port", "30000", "--unit", "sglang-kimi.service"]
runpy.run_path("{stage}/sglang_sim.py", run_name="__main__")
"""
QUICKSTART_UNIT = """[Unit]
Description=simulated SGLang Kimi-K2.5 INT4, TP=8, EAGLE-3 (the README's Quick start)

[Service]
Type=simple
Environment=PYTHONPATH=/run/simpkg PYTHONUNBUFFERED=1
ExecStart=/usr/bin/python3 -m sglang.launch_server --model-path /models/Kimi-K2.5-INT4 --tp 8 \\
    --speculative-algorithm EAGLE3
KillMode=control-group
TimeoutStopSec=5s
"""
SAMPLE_START, SAMPLE_END = "<!-- quickstart sample: tests/e2e/test_e2e_deb.py -->", "<!-- end of sample -->"


def quickstart_commands() -> list[str]:
    """The README's Quick start block, as written (comments dropped)."""
    text = (REPO / "README.md").read_text().split("## Quick start", 1)[1]
    block = text.split("\n\n")[2]
    commands = [line[4:].split("  #")[0].strip() for line in block.splitlines() if line.startswith("    ")]
    assert commands and commands[0].startswith("make deb && apt install"), commands
    return commands


def normalized(text: str) -> str:
    """A transcript without what changes from run to run: ids, times, counts, and the padding and
    wrapping that follow their widths."""
    return " ".join(re.sub(r"\d+", "N", re.sub(r"[0-9a-f]{32}", "ID", text)).split())


def test_the_readme_quick_start_works_as_written(box: PackageSandbox) -> None:
    box.write("/run/simpkg/sglang/__init__.py", "")
    box.write("/run/simpkg/sglang/launch_server.py", LAUNCH_SERVER.format(stage=box.stage))
    box.write(f"/etc/systemd/system/{UNIT}", QUICKSTART_UNIT)
    box.systemctl("daemon-reload")
    box.systemctl("start", UNIT)  # "on the host that runs the server's unit"
    box.wait_for(lambda: any("fired up" in str(e.get("MESSAGE")) for e in box.journal(f"_SYSTEMD_UNIT={UNIT}")),
                 120, "the server ready")
    transcript = []
    try:
        for command in quickstart_commands():
            if command.startswith("make deb && "):
                # The `deb` fixture ran `make deb` in this checkout; the box installed what it built
                # (so this `apt install` finds it installed already).
                command = command.removeprefix("make deb && ")
            # Not a terminal: what a pipe gets, 100 columns (no COLUMNS from whoever runs the tests).
            result = box.run("env", "-u", "COLUMNS", "bash", "-c", f"cd {REPO} && {command}", check=False,
                             timeout=300)
            assert result.returncode == 0, f"{command}: {result.returncode}\n{result.stdout}{result.stderr}"
            if command.startswith("phasewatch "):
                transcript.append(f"# {command}\n{result.stdout}")
        assert "ready" in transcript[-1], transcript[-1]
        assert box.read(CONFIG) is not None and "engine: sglang" in box.read(CONFIG)
        # The unit's next start keeps every line: the drop-in is loaded.
        assert box.show(UNIT, "LogRateLimitBurst")["LogRateLimitBurst"] == "100000"
        shown = "".join(transcript)
        (REPO / "build").mkdir(exist_ok=True)
        (REPO / "build" / "quickstart.txt").write_text(shown)
        readme = (REPO / "README.md").read_text()
        sample = readme.split(SAMPLE_START, 1)[1].split(SAMPLE_END, 1)[0]
        sample_lines = [line[4:] for line in sample.strip("\n").splitlines()]
        assert sample_lines
        # What the README shows is what the commands print (times, ids and counts aside).
        assert normalized("\n".join(sample_lines)) in normalized(shown.rstrip("\n")), shown
    finally:
        box.systemctl("disable", "--now", WATCHER, check=False)
        box.systemctl("stop", UNIT, check=False)
        box.run("sh", "-c", f"rm -rf {CONFIG} /etc/systemd/system/{UNIT} {STATE}/*", check=False)
        box.systemctl("daemon-reload", check=False)


def test_the_host_does_not_see_the_installation(box: PackageSandbox) -> None:
    assert box.run("dpkg-query", "-W", "-f", "${Status}", "phasewatch").stdout == "install ok installed"
    assert box.run("test", "-e", "/usr/share/phasewatch/polkit/50-phasewatch.rules", check=False).returncode == 0
    assert host_package_status() == box.host_status_before
    if not box.host_status_before:
        assert not Path("/usr/share/phasewatch/polkit/50-phasewatch.rules").exists()


def test_package_lays_out_the_files_and_the_user(box: PackageSandbox) -> None:
    files = set(box.run("dpkg-query", "-L", "phasewatch").stdout.split())
    for path in ("/usr/bin/phasewatch", "/lib/systemd/system/phasewatch@.service",
                 "/usr/lib/sysusers.d/phasewatch.conf", "/usr/lib/tmpfiles.d/phasewatch.conf",
                 "/usr/lib/systemd/catalog/phasewatch.catalog", "/usr/share/phasewatch/polkit/50-phasewatch.rules",
                 "/usr/share/phasewatch/prometheus/phasewatch-rules.yml",
                 "/usr/share/phasewatch/alertmanager/phasewatch-group.yml",
                 "/usr/lib/python3/dist-packages/phasewatch/__init__.py", "/usr/share/doc/phasewatch/copyright"):
        assert path in files, path
    # The polkit rule is a template: the package never puts a live rule in /etc (an edited one is
    # the operator's, never replaced by an upgrade).
    assert not any(path.startswith("/etc/polkit-1") for path in files)
    # No config in /etc: `phasewatch init` writes it (an example in /etc would be taken for an
    # operator's edit, and a conffile init rewrote would make every upgrade ask).
    assert not any(path.startswith("/etc/phasewatch") for path in files)
    assert any(path.startswith("/usr/share/doc/phasewatch/examples/phasewatch.yaml") for path in files)
    assert box.run("dpkg-query", "-W", "-f", "${Conffiles}", "phasewatch").stdout.strip() == ""
    # postinst: the user (in systemd-journal), its state directory, the catalog, the unit loaded.
    assert "systemd-journal" in box.run("id", "-nG", "phasewatch").stdout.split()
    assert box.run("stat", "-c", "%U %a", STATE).stdout.split() == ["phasewatch", "700"]
    assert STALLED_ID in box.run("journalctl", "--list-catalog").stdout
    unit = box.show(WATCHER, "FragmentPath", "ExecStart", "UnitFileState")
    # Debian 13's systemd searches /usr/lib only (its /lib is a link to usr/lib).
    assert unit["FragmentPath"] == ("/lib/systemd/system/phasewatch@.service" if box.os_root is None
                                    else "/usr/lib/systemd/system/phasewatch@.service")
    assert "path=/usr/bin/phasewatch" in unit["ExecStart"]
    assert unit["UnitFileState"] == "disabled"  # the package enables nothing
    # The command runs on Debian's interpreter, from dist-packages.
    assert box.run("head", "-1", "/usr/bin/phasewatch").stdout.strip() == "#!/usr/bin/python3"
    where = box.run("/usr/bin/python3", "-c", "import phasewatch; print(phasewatch.__file__)").stdout.strip()
    assert where == "/usr/lib/python3/dist-packages/phasewatch/__init__.py"
    # The man pages (generated from the parser: man/), read by man as an operator would; the
    # Prometheus rules' runbook_url absolute, to the runbook the package installs, uncompressed.
    for section, page in (("1", "phasewatch"), ("5", "phasewatch.yaml"), ("8", "phasewatch@.service")):
        shown = box.run("env", "MANWIDTH=100", "man", "-P", "cat", section, page, check=False)
        assert shown.returncode == 0 and "SEE ALSO" in shown.stdout, (page, shown.stderr)
    assert "EXIT STATUS" in box.run("env", "MANWIDTH=100", "man", "-P", "cat", "phasewatch").stdout
    rules = box.read("/usr/share/phasewatch/prometheus/phasewatch-rules.yml") or ""
    urls = re.findall(r"runbook_url: (\S+)", rules)
    assert urls and all(u.startswith("file:///usr/share/doc/phasewatch/runbook.md#") for u in urls), urls
    assert box.run("test", "-f", "/usr/share/doc/phasewatch/runbook.md", check=False).returncode == 0
    for example in ("sglang-log-rate.conf", "phasewatch-remote-scrape.conf"):
        assert f"/usr/share/doc/phasewatch/examples/{example}" in files, example
    # `Architecture: all`: no compiled module (debian/rules builds without the C journal reader).
    assert not any(path.endswith(".so") for path in files)
    assert box.run("/usr/bin/phasewatch", "--version").stdout.endswith(" (journal reader: Python)\n")


def sim_unit(stage: Path) -> str:
    return f"""[Unit]
Description=simulated SGLang Kimi-K2.5 INT4, TP=8, EAGLE-3 (phasewatch e2e, packaged)

[Service]
Type=simple
EnvironmentFile=/run/sglang-sim.env
ExecStart=/usr/bin/python3 {stage}/sglang_sim.py run --port 30000 $SIM_ARGS
KillMode=control-group
TimeoutStopSec=5s
LogRateLimitIntervalSec=30s
LogRateLimitBurst=100000
"""


def status(box: PackageSandbox) -> dict[str, Any] | None:
    text = box.read(f"{STATE}/{UNIT}.status.json")
    try:
        return json.loads(text) if text else None
    except json.JSONDecodeError:
        return None  # being replaced


def test_installed_package_restarts_a_hung_start_up_on_debians_python(box: PackageSandbox) -> None:
    # The operator's steps (README): the polkit rule from its template, one config file, enable.
    box.run("cp", "/usr/share/phasewatch/polkit/50-phasewatch.rules", "/etc/polkit-1/rules.d/")
    config = {"unit": UNIT, "rank_skew": "5m", "restart_budget": {"max": 3, "window": "6h", "backoff": "1s"},
              "metrics": {"listen": "127.0.0.1:9877"},
              "phases": {"draft_cuda_graph_capture": {"deadline": "6s"}}}
    box.write(CONFIG, json.dumps(config, indent=1))
    box.run("/usr/bin/phasewatch", "check-config", CONFIG)
    box.write("/etc/systemd/system/sglang-kimi.service", sim_unit(box.stage))
    box.write("/run/sglang-sim.env", "SIM_ARGS=--scale 0.01 --hang TP3:draft_cuda_graph_capture\n")
    box.systemctl("daemon-reload")
    box.systemctl("enable", "--now", WATCHER)
    box.systemctl("start", UNIT)
    box.write("/run/sglang-sim.env", "SIM_ARGS=--scale 0.01\n")  # the next start-up is a healthy one

    # The daemon: Debian's interpreter, Debian's packages, nothing of a venv or of this checkout.
    pid = box.show(WATCHER, "MainPID")["MainPID"]
    assert pid != "0"
    exe = box.run("readlink", f"/proc/{pid}/exe").stdout.strip()
    assert exe.startswith("/usr/bin/python3"), exe
    cmdline = box.run("cat", f"/proc/{pid}/cmdline").stdout.split("\0")
    assert cmdline[:3] == ["/usr/bin/python3", "/usr/bin/phasewatch", "run"], cmdline
    environ = box.run("cat", f"/proc/{pid}/environ").stdout.split("\0")
    assert not [v for v in environ if v.startswith(("PYTHONPATH=", "PYTHONHOME=", "VIRTUAL_ENV="))]
    mapped = {line.split()[-1] for line in box.run("cat", f"/proc/{pid}/maps").stdout.splitlines()
              if len(line.split()) >= 6 and line.split()[-1].startswith("/")}
    assert not [path for path in mapped if ".venv" in path or path.startswith(str(REPO))], mapped
    # Compiled modules of python3-systemd (journal) and python3-pystemd (D-Bus) from dist-packages.
    assert [p for p in mapped if p.startswith("/usr/lib/python3/dist-packages/systemd/")], mapped

    done = box.wait_for(lambda: (s := status(box)) and len(s["restarted"]) == 1 and s, 90, "phasewatch's restart")
    first = done["restarted"][0]
    alerts = box.wait_for(lambda: [e for e in box.journal(f"PHASEWATCH_UNIT={UNIT}", f"MESSAGE_ID={STALLED_ID}")],
                          10, "the alert")
    [alert] = alerts
    assert (alert["PHASEWATCH_VERDICT"], alert["PHASEWATCH_RANK"], alert["PHASEWATCH_PHASE"]) == (
        "stalled", "TP3", "draft_cuda_graph_capture")
    assert alert["PHASEWATCH_INVOCATION"] == first
    assert "restarting (1 of 3 in 6h)" in alert["MESSAGE"]
    assert alert["_SYSTEMD_UNIT"] == WATCHER
    # Once in the watcher's journal (the daemon's stderr is the journal: it does not log it again).
    shown = box.run("journalctl", "-u", WATCHER, "-o", "cat", "--no-pager").stdout
    assert shown.count(alert["MESSAGE"]) == 1, shown
    # pystemd 0.11 now in the map too: the restart went over D-Bus.
    mapped = box.run("cat", f"/proc/{pid}/maps").stdout
    assert "/usr/lib/python3/dist-packages/pystemd/" in mapped
    # The restarted start-up is a healthy one, and the daemon sees it through.
    ready = box.wait_for(lambda: (s := status(box)) and s.get("state") == "ready" and s, 90, "the ready state")
    assert ready["invocation_id"] != first
    # The catalog explains the alert (journalctl -x).
    explained = box.run("journalctl", "-x", "--no-pager", f"MESSAGE_ID={STALLED_ID}").stdout
    assert "The limits are per phase" in explained



def test_upgrade_keeps_the_operators_rule_and_config_and_restarts_the_running_instance(
        box: PackageSandbox, deb: Path) -> None:
    rule = "/etc/polkit-1/rules.d/50-phasewatch.rules"
    shipped = box.read("/usr/share/phasewatch/polkit/50-phasewatch.rules")
    assert shipped is not None
    edited_rule = shipped.replace('["sglang-kimi.service"]', '["sglang-kimi.service", "sglang-draft.service"]')
    box.write(rule, edited_rule)
    config = json.dumps({"unit": UNIT, "metrics": {"listen": "127.0.0.1:9877"}}, indent=1)
    box.write(CONFIG, config)
    box.systemctl("restart", WATCHER)
    before = box.show(WATCHER, "MainPID")["MainPID"]
    # The same version again takes the upgrade path of the maintainer scripts (configure <old version>).
    box.run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "--reinstall",
            f"{box.stage}/{deb.name}", timeout=300)
    assert box.read(rule) == edited_rule
    assert box.read(CONFIG) == config
    after = box.show(WATCHER, "MainPID", "ActiveState")
    assert after["ActiveState"] == "active" and after["MainPID"] not in ("0", before)


FLOOD_LINES = 80_000  # past journald's default burst here (10,000 x its free-space factor, 3 at 512M)


def kept_lines(box: PackageSandbox, name: str, *properties: str) -> int:
    box.run("systemd-run", "--wait", "--quiet", f"--unit={name}", *properties, "/usr/bin/python3", "-c",
            f"import sys\nfor i in range({FLOOD_LINES}): sys.stdout.write(f'flood {{i}}\\n')\n", timeout=120)
    def count() -> int:
        out = box.run("journalctl", "--quiet", "-o", "cat", f"_SYSTEMD_UNIT={name}.service", check=False).stdout
        return sum(1 for line in out.splitlines() if line.startswith("flood "))
    # journald may still be writing when the unit has exited: done when the count stops growing.
    counts = [-1]
    box.wait_for(lambda: counts.append(count()) or counts[-1] == counts[-2] > 0, 60, "the flood in the journal",
                 interval=1.0)
    return counts[-1]


def test_per_unit_finite_log_rate_burst_keeps_every_line_where_zero_does_not(box: PackageSandbox) -> None:
    # units/sglang-kimi.service and units/sglang-log-rate.conf: a large finite burst for the server
    # unit alone. LogRateLimitBurst=0 is not exported to journald at all (the global limit stays).
    zero = kept_lines(box, "flood-zero", "-p", "LogRateLimitIntervalSec=30s", "-p", "LogRateLimitBurst=0")
    finite = kept_lines(box, "flood-finite", "-p", "LogRateLimitIntervalSec=30s", "-p", "LogRateLimitBurst=100000")
    assert zero < FLOOD_LINES // 2
    assert finite == FLOOD_LINES
