#!/usr/bin/env python3
"""phasewatch's performance bench (issue 5), inside the real-systemd harness of tests/e2e/sandbox.py.

    .venv/bin/python bench/run.py            the full run: writes bench/results.json, docs/performance.md
    .venv/bin/python bench/run.py --quick --out DIR     small N, one repetition (CI: every row, no timing)

(`make bench` / `bash scripts/bench.sh` install what it needs first.) Every timing is the median of
several runs and is reported as a ratio against a reference measured in the same run and sandbox:
the machine is shared and noisy, absolute seconds are not comparable between runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))

import report  # noqa: E402
from e2e_env import BASE_CONFIG, STATE_DIR, UNIT, VENV, WATCHER, WATCHER_DROPIN  # noqa: E402
from sandbox import REPO, Sandbox  # noqa: E402

PROFILES: dict[str, dict[str, Any]] = {
    "full": {"n": 300_000, "scale": [30_000, 100_000, 300_000, 1_000_000], "reps": 5, "scale_reps": 3,
             "invocations": 3, "crash_invocations": 12, "follow_lines": 220, "action_reps": 5, "idle_seconds": 60,
             "silent_seconds": 60,
             "burst_lines": 50_000, "burst_seconds": 2.0, "profile": True, "follow_steps": 250},
    "quick": {"n": 3_000, "scale": [1_000, 3_000], "reps": 1, "scale_reps": 1, "invocations": 1,
              "crash_invocations": 2,
              "follow_lines": 12, "action_reps": 1, "idle_seconds": 2, "silent_seconds": 2,
              "burst_lines": 2_000, "burst_seconds": 0.5, "profile": False, "follow_steps": 20},
}
STATUS = f"{STATE_DIR}/{UNIT}.status.json"
WORK = "/run/bench"  # inside the sandbox
MID_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
MID_STOPPED = "9d1aaa27d60140bd96365438aad20286"
CATCHUP_UNIT = """[Unit]
Description=phasewatch bench: a journal of {n} entries ({k} start-ups)

[Service]
Type=oneshot
TimeoutStartSec=infinity
ExecStart={venv}/bin/python {repo}/bench/writer.py catchup --entries {per} --mix {mix}
"""
WATCHED_UNIT = f"""[Unit]
Description=phasewatch bench: the watched unit (bench/writer.py)

[Service]
Type=simple
EnvironmentFile={WORK}/writer.env
ExecStart={VENV}/bin/python {REPO}/bench/writer.py $WRITER_ARGS
KillMode=control-group
TimeoutStopSec=5s
"""


def log(text: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


class BenchSandbox(Sandbox):
    """The e2e sandbox with room for a journal of millions of entries (its journal is a tmpfs)."""

    def _stage_files(self) -> None:
        super()._stage_files()
        (self.stage / "journald.conf").write_text(
            "[Journal]\nStorage=persistent\nRateLimitBurst=0\nSystemMaxUse=8G\nSystemKeepFree=1G\n")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


DEFAULT_METHODS = "a_raw_reader,b_journalctl_grep,c_fail2ban_regex,d_phasewatch_replay"


class Bench:
    def __init__(self, box: Sandbox, settings: dict[str, Any]) -> None:
        self.box = box
        self.s = settings

    # -- helpers ---------------------------------------------------------------------------------
    def inside(self, *args: str, timeout: float = 3600) -> str:
        return self.box.run(f"{VENV}/bin/python", f"{REPO}/bench/inside.py", *args, timeout=timeout).stdout

    def now(self) -> float:
        return float(self.box.run("date", "+%s.%N").stdout)

    def main_pid(self, unit: str) -> int:
        return int(self.box.show(unit, "MainPID")["MainPID"])

    def proc(self, pid: int) -> dict[str, Any]:
        """CPU seconds (all threads), RSS in KiB, and each thread's voluntary context switches."""
        script = (f"cat /proc/{pid}/stat; grep VmRSS /proc/{pid}/status; grep -E '^Rss(Anon|File|Shmem)' "
                  f"/proc/{pid}/status | tr '\\n' ' '; echo; "
                  f"for t in /proc/{pid}/task/*; do echo \"T $(basename $t) $(cat $t/comm) "
                  f"$(grep ^voluntary_ctxt_switches $t/status | cut -f2)\"; done")
        out = self.box.run("sh", "-c", script).stdout.splitlines()
        stat = out[0].rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = (int(stat[11]) + int(stat[12])) / ticks
        rss = int(out[1].split()[1])
        parts = out[2].split()  # RssAnon: N kB RssFile: N kB RssShmem: N kB
        kinds = {parts[i].rstrip(":"): int(parts[i + 1]) for i in range(0, len(parts) - 1, 3)}
        threads = {}
        for line in out[3:]:
            _, tid, *comm, switches = line.split()
            threads[f"{' '.join(comm)}:{tid}"] = int(switches)
        return {"cpu": cpu, "rss_kib": rss, "rss_kinds_kib": kinds, "threads": threads}

    def journal_since(self, since: float, *matches: str) -> list[dict[str, Any]]:
        return [e for e in self.box.journal(*matches) if int(e["__REALTIME_TIMESTAMP"]) / 1e6 >= since]

    def status(self) -> dict[str, Any] | None:
        text = self.box.read(STATUS)
        try:
            return json.loads(text) if text else None
        except json.JSONDecodeError:
            return None

    def reset(self, writer_args: str, config: dict[str, Any] | None = None) -> float:
        """Stop both units, forget phasewatch's state, write the config and the writer's arguments."""
        self.box.systemctl("stop", WATCHER, UNIT, check=False)
        self.box.systemctl("reset-failed", check=False)
        self.box.run("rm", "-rf", STATE_DIR, check=False)
        document = {**BASE_CONFIG, "health": {"enabled": False}, **(config or {})}
        self.box.write(f"/run/phasewatch/{UNIT}.yaml", json.dumps(document, indent=1))
        self.box.write(f"{WORK}/writer.env", f"WRITER_ARGS={writer_args}\n")
        time.sleep(0.2)
        return self.now()

    def restarts(self, since: float) -> list[dict[str, Any]]:
        """PID 1's `Stopped` entries of restart jobs of the watched unit (systemd 252 names the job there)."""
        return [e for e in self.journal_since(since, f"UNIT={UNIT}", "_PID=1", f"MESSAGE_ID={MID_STOPPED}")
                if e.get("JOB_TYPE") == "restart"]

    def start(self) -> None:
        self.box.systemctl("start", WATCHER)  # Type=notify: returns once phasewatch is READY
        self.box.systemctl("start", UNIT)

    def wait_state(self, *states: str, timeout: float = 60) -> dict[str, Any]:
        result: dict[str, Any] = self.box.wait_for(
            lambda: (s := self.status()) and s.get("state") in states and s, timeout, f"state {states}", 0.1)
        return result

    # -- set-up ----------------------------------------------------------------------------------
    def install(self) -> None:
        self.box.run("mkdir", "-p", WORK)
        self.box.write(f"{WORK}/writer.env", "WRITER_ARGS=silent\n")
        self.box.write(f"/run/systemd/system/{UNIT}", WATCHED_UNIT)
        self.box.write("/run/systemd/system/phasewatch@.service", (REPO / "units" / "phasewatch@.service").read_text())
        self.box.write("/run/systemd/system/phasewatch@.service.d/e2e.conf", WATCHER_DROPIN)
        for n in self.s["scale"]:
            k = self.s["invocations"]
            self.box.write(f"/run/systemd/system/{catchup_unit(n)}",
                           CATCHUP_UNIT.format(n=n, k=k, per=n // k, venv=VENV, repo=REPO, mix="serving"))
        n, k = self.s["n"], self.s["crash_invocations"]
        self.box.write(f"/run/systemd/system/{crash_unit(n)}",
                       CATCHUP_UNIT.format(n=n, k=k, per=n // k, venv=VENV, repo=REPO, mix="crash"))
        for name, mix in ((access_unit(n), "access"), (decode_unit(n), "decode")):
            self.box.write(f"/run/systemd/system/{name}",
                           CATCHUP_UNIT.format(n=n, k=1, per=n, venv=VENV, repo=REPO, mix=mix))
        self.box.systemctl("daemon-reload")

    def write_journals(self, parts: set[str] | None = None) -> dict[str, Any]:
        """Each catch-up unit started `invocations` times (the crash-heavy one `crash_invocations`
        times, the access-heavy and decode-heavy ones once): the journals the readers race over.
        With `parts` of single mixes alone (`catchup_access`, `catchup_decode`), only theirs."""
        out = {}
        units = [(str(n), catchup_unit(n), self.s["invocations"]) for n in self.s["scale"]]
        units.append((f"crash-{self.s['n']}", crash_unit(self.s["n"]), self.s["crash_invocations"]))
        everything = parts is None or all_journals(parts)
        if not everything:
            units = []
        for mix, unit_of in (("access", access_unit), ("decode", decode_unit)):
            if everything or f"catchup_{mix}" in parts:  # type: ignore[operator]
                units.append((f"{mix}-{self.s['n']}", unit_of(self.s["n"]), 1))
        for key, unit, starts in units:
            began = time.perf_counter()
            for _ in range(starts):
                self.box.systemctl("start", unit)
            entries = int(self.inside("settle", "--unit", unit).strip())
            seconds = time.perf_counter() - began
            log(f"journal of {unit}: {entries} entries in {seconds:.1f}s")
            out[key] = {"entries": entries, "write_seconds": seconds}
        usage = self.box.run("journalctl", "--disk-usage").stdout.strip()
        return {"units": out, "disk_usage": usage}

    # -- 1 and 6: catch-up -----------------------------------------------------------------------
    def catchup(self, unit: str) -> dict[str, Any]:
        log(f"catch-up (a)-(d) over {unit}, {self.s['reps']} runs each")
        before = self.s.get("before")
        extra = ("--before", before, "--methods", f"{DEFAULT_METHODS},g_replay_before") if before else ()
        result: dict[str, Any] = json.loads(self.inside("catchup", "--unit", unit, "--reps", str(self.s["reps"]),
                                                        *extra))
        return result

    def rebuild(self, unit: str) -> dict[str, Any]:
        log(f"daemon rebuild over {unit}, {self.s['reps']} runs each")
        result: dict[str, Any] = json.loads(self.inside(
            "catchup", "--unit", unit, "--reps", str(self.s["reps"]),
            "--methods", "a_raw_reader,e_daemon_rebuild,f_daemon_rebuild_python"))
        return result

    def scale(self) -> dict[str, Any]:
        out = {}
        for n in self.s["scale"]:
            log(f"scale: replay of {catchup_unit(n)}")
            out[str(n)] = json.loads(self.inside("catchup", "--unit", catchup_unit(n), "--reps",
                                                 str(self.s["scale_reps"]),
                                                 "--methods", "a_raw_reader,d_phasewatch_replay"))
        return out

    def profile(self, unit: str) -> dict[str, Any]:
        """py-spy over one replay of a catch-up journal: where the time goes."""
        spy = shutil.which("py-spy", path=str(VENV / "bin")) or shutil.which("py-spy")
        if spy is None:
            return {"skipped": "py-spy is not installed (pip install py-spy)"}
        log(f"profile: py-spy over replay of {unit}")
        raw = f"{WORK}/profile.txt"
        self.box.run(spy, "record", "--format", "raw", "--rate", "250", "-o", raw, "--",
                     f"{VENV}/bin/python", "-m", "phasewatch", "replay", "--unit", unit, "--json", timeout=1800)
        return report.summarize_profile(self.box.read(raw) or "")

    # -- 2: follow latency -----------------------------------------------------------------------
    def follow(self) -> dict[str, Any]:
        lines = self.s["follow_lines"]
        log(f"follow latency: {lines} paced lines")
        out = f"{WORK}/follow.json"
        self.box.run("rm", "-f", out)
        self.reset(f"paced --lines {lines} --interval 0.03 --status {STATUS} --out {out}")
        self.start()
        text = self.box.wait_for(lambda: self.box.read(out), 60 + lines * 0.5, "the paced writer's results", 0.5)
        samples = json.loads(text)
        status = [s["status"] for s in samples if s["status"] is not None]
        reader = [s["reader"] for s in samples if s["reader"] is not None]
        waiting = [s["waiting_reader"] for s in samples if s.get("waiting_reader") is not None]
        return {"lines": len(samples), "missed_status": len(samples) - len(status),
                "status_p50": percentile(status, 50), "status_p99": percentile(status, 99),
                "status_max": max(status, default=float("nan")),
                "reader_p50": percentile(reader, 50), "reader_p99": percentile(reader, 99),
                "waiting_reader_p50": percentile(waiting, 50), "waiting_reader_p99": percentile(waiting, 99),
                "first_line_status": samples[0]["status"] if samples else None,
                "lines_after_silence": sum(1 for s in samples if s.get("after_silence")),
                "reader_missed": len(samples) - len(reader)}

    def follow_steps(self) -> dict[str, Any]:
        """Journal -> /status: TP0's capture bar, `steps` progress steps at 10 a second (each its own
        entry), while `inside.py poll-status` GETs /status every 5 ms; each step's latency is the
        first poll that shows it (or a later step) less the time the writer wrote it."""
        count = self.s["follow_steps"]
        log(f"follow latency: {count} progress steps at 10/s, /status polled every 5 ms")
        out, seen = f"{WORK}/steps.json", f"{WORK}/steps-seen.txt"
        self.box.run("rm", "-f", out, seen)
        self.reset(f"steps --steps {count} --per-second 10 --out {out}",
                   {"phases": {"cuda_graph_capture": {"deadline": "30m", "stall": "none"}}})
        self.box.systemctl("stop", "bench-poll-status.service", check=False)
        self.box.run("systemd-run", "--quiet", "--collect", "--unit=bench-poll-status", f"{VENV}/bin/python",
                     f"{REPO}/bench/inside.py", "poll-status", "--url",
                     f"http://{BASE_CONFIG['metrics']['listen']}/status", "--out", seen)
        self.start()
        text = self.box.wait_for(lambda: self.box.read(out), 90 + count * 0.2, "the step writer's times", 0.5)
        time.sleep(1.0)
        self.box.systemctl("stop", "bench-poll-status.service", WATCHER, UNIT, check=False)
        written = json.loads(text)["written"]
        polls = [(float(at), int(step), published) for at, step, published in
                 (line.split() for line in (self.box.read(seen) or "").splitlines() if line.strip())]
        stamps = [at(e) for e in self.journal_since(0, f"_SYSTEMD_UNIT={UNIT}")
                  if b"Capturing batches" in message_bytes(e)][-len(written):]
        delays, to_journal, to_publish, missed = [], [], [], 0
        for step, wrote in enumerate(written, start=1):
            shown = next(((t, p) for t, n, p in polls if n >= step and t >= wrote), None)
            if shown is None:
                missed += 1
                continue
            delays.append(shown[0] - wrote)
            if len(stamps) == len(written):  # where the time went: journald, the daemon, the HTTP answer
                to_journal.append(stamps[step - 1] - wrote)
                to_publish.append(dt.datetime.fromisoformat(shown[1]).timestamp() - wrote)
        return {"steps": len(written), "missed": missed, "p50": percentile(delays, 50),
                "p99": percentile(delays, 99), "max": max(delays, default=float("nan")), "delays": delays,
                "to_journal": to_journal, "to_publish": to_publish}

    def watch_status(self) -> str:
        """Start inside.py watch-status in the background (a transient unit); returns its output file."""
        seen = f"{WORK}/seen.txt"
        self.box.systemctl("stop", "bench-watch-status.service", check=False)
        self.box.run("rm", "-f", seen)
        self.box.run("systemd-run", "--quiet", "--collect", "--unit=bench-watch-status", f"{VENV}/bin/python",
                     f"{REPO}/bench/inside.py", "watch-status", "--status", STATUS, "--out", seen)
        return seen

    def latencies(self, seen: str, since: float, until: float) -> dict[str, Any]:
        """Entry -> status latencies of the entries journald stamped in [since, until] (inside.py latency)."""
        self.box.systemctl("stop", "bench-watch-status.service", check=False)
        found = json.loads(self.inside("latency", "--unit", UNIT, "--seen", seen, "--since", str(since),
                                       "--until", str(until)))
        delays = found["delays"]
        return {"entries": found["entries"], "missed_status": found["missed"], "p50": percentile(delays, 50),
                "p99": percentile(delays, 99), "max": max(delays, default=float("nan"))}

    def follow_rate(self) -> dict[str, Any]:
        """Entry -> status latency while the ready unit writes 100 Decode lines a second."""
        seconds = max(self.s["idle_seconds"] / 2, 2)
        log(f"follow latency: 100 lines/s for {seconds:g}s")
        self.reset(f"rate --per-second 100 --seconds {seconds + 30}")
        seen = self.watch_status()
        self.start()
        self.wait_state("serving", timeout=60)
        time.sleep(1)
        since = self.now()
        time.sleep(seconds)
        result = self.latencies(seen, since, self.now() - 0.5)
        self.box.systemctl("stop", WATCHER, UNIT, check=False)
        return result

    # -- 3: action latency -----------------------------------------------------------------------
    def action(self, busy: bool) -> dict[str, Any]:
        deadline = 2.0
        marker = f"{WORK}/deadline.marker"
        runs = []
        for rep in range(self.s["action_reps"]):
            self.box.run("rm", "-f", marker)
            since = self.reset(f"deadline --marker {marker}" + (" --busy" if busy else ""),
                              {"phases": {"cuda_graph_capture": {"deadline": f"{deadline:g}s", "stall": "none"}}})
            self.start()
            restart = self.box.wait_for(lambda since=since: self.restarts(since), 60, "phasewatch's restart", 0.2)[0]
            begins = [e for e in self.journal_since(since, f"_SYSTEMD_UNIT={UNIT}")
                      if "Capture cuda graph begin" in str(e.get("MESSAGE"))]
            due = min(at(e) for e in begins) + deadline
            alerts = self.journal_since(since, f"PHASEWATCH_UNIT={UNIT}")
            early = [a for a in alerts if a.get("PHASEWATCH_VERDICT") != "stalled"]
            if early:
                log("  other alerts: " + "; ".join(f"{a.get('PHASEWATCH_VERDICT')} {at(a) - due:+.3f}s "
                                                   f"{str(a.get('MESSAGE'))[:160]}" for a in early))
            alert = [a for a in alerts if a.get("PHASEWATCH_VERDICT") == "stalled"][0]
            stopping = [e for e in self.journal_since(since, f"UNIT={UNIT}", "_PID=1", f"MESSAGE_ID={MID_STOPPING}")
                        if at(e) >= due]
            runs.append({"alert": at(alert) - due, "stopping": at(stopping[0]) - due if stopping else None,
                         "stopped": at(restart) - due})
            log(f"action latency ({'busy' if busy else 'idle'}) run {rep + 1}: alert {runs[-1]['alert']:.3f}s, "
                f"restart job stopped the unit {runs[-1]['stopped']:.3f}s after the deadline")
        self.box.systemctl("stop", WATCHER, UNIT, check=False)
        return {"runs": runs, "alert_median": median([r["alert"] for r in runs]),
                "stopping_median": median([r["stopping"] for r in runs if r["stopping"] is not None]),
                "stopped_median": median([r["stopped"] for r in runs]), "deadline": deadline}

    # -- 4: idle cost ----------------------------------------------------------------------------
    def idle_rate(self) -> dict[str, Any]:
        seconds = self.s["idle_seconds"]
        log(f"idle cost: 100 lines/s for {seconds}s")
        self.reset(f"rate --per-second 100 --seconds {seconds + 30}")
        self.start()
        self.wait_state("serving", timeout=60)
        time.sleep(1)
        return self.sample(seconds)

    def sample(self, seconds: float, strace: bool = False) -> dict[str, Any]:
        daemon = self.main_pid(WATCHER)
        journald = self.main_pid("systemd-journald.service")
        before = {"daemon": self.proc(daemon), "journald": self.proc(journald)}
        started = time.perf_counter()
        rss = []
        while time.perf_counter() - started < seconds:
            rss.append(self.proc(daemon)["rss_kib"])
            time.sleep(min(1.0, max(seconds - (time.perf_counter() - started), 0.01)))
        elapsed = time.perf_counter() - started
        after = {"daemon": self.proc(daemon), "journald": self.proc(journald)}
        cpu = {k: (after[k]["cpu"] - before[k]["cpu"]) / elapsed * 100 for k in before}
        wakeups = {name: after["daemon"]["threads"].get(name, 0) - count
                   for name, count in before["daemon"]["threads"].items()}
        result: dict[str, Any] = {"seconds": elapsed, "daemon_cpu_percent": cpu["daemon"],
                                  "journald_cpu_percent": cpu["journald"], "daemon_rss_max_kib": max(rss),
                                  "thread_wakeups": wakeups}
        if strace and shutil.which("strace"):
            # A second window (ptrace's stops would count as context switches in the first one).
            traced = self.box.run("sh", "-c", f"timeout -s INT {seconds} strace -c -e trace=poll,ppoll,select,"
                                  f"pselect6,epoll_wait,epoll_pwait,sendmsg,recvmsg -p {daemon} 2>&1 || true",
                                  timeout=seconds + 30)
            result["strace_main_thread"] = parse_strace(traced.stdout)
            result["strace_seconds"] = seconds
        return result

    def idle_silent(self, starting: bool) -> dict[str, Any]:
        seconds = self.s["silent_seconds"]
        log(f"idle cost: no lines for {seconds}s ({'starting' if starting else 'ready'})")
        self.reset("silent --starting" if starting else "silent")
        started = self.now()
        self.start()
        self.wait_state("starting" if starting else "ready", timeout=60)
        if starting:  # every rank has printed its lines (the kv cache pool)
            self.box.wait_for(lambda: (s := self.status()) and s.get("phase") == "kv_cache_alloc", 30, "kv cache")
        time.sleep(3)  # past the looks for entries that follow the last ones (stages/s4_judge/wakeups.py TALKING)
        window = self.now()
        result = self.sample(seconds, strace=True)
        result.update(self.expected_wakeups(result["seconds"], starting, window - started,
                                            (self.status() or {}).get("phase")))
        return result

    def expected_wakeups(self, seconds: float, starting: bool, since_start: float, phase: str | None) -> dict[str, Any]:
        """What the daemon has reason to wake for in a silent window of `seconds`, from its config: the
        watchdog (every WatchdogSec/2), the signs-of-life sampling (every vitals.period, while starting),
        and the policy's deadlines (a phase's deadline or stall window ending in the window; counted if it
        could: the phase began after the unit started, `since_start` before the window)."""
        from phasewatch.config.load import Config
        from phasewatch.records import Phase

        usec = self.box.show(WATCHER, "WatchdogUSec")["WatchdogUSec"]
        watchdog = parse_seconds(usec) / 2
        period = Config(unit=UNIT).vitals.period
        limits = Config(unit=UNIT).limits(Phase(phase)) if starting and phase else None
        ends = [x for x in (limits.deadline, limits.stall) if x is not None] if limits else []
        deadlines = sum(1 for x in ends if x <= since_start + seconds)
        return {"watchdog_interval_s": watchdog, "vitals_period_s": period if starting else None,
                "expected": {"watchdog": int(seconds // watchdog), "deadlines": deadlines,
                             "sampling": int(seconds // period) if starting else 0},
                "phase_limits_s": ends}

    # -- 5: burst --------------------------------------------------------------------------------
    def burst(self) -> dict[str, Any]:
        lines, seconds = self.s["burst_lines"], self.s["burst_seconds"]
        log(f"burst: 8 ranks, {lines} lines in {seconds}s")
        trigger, out = f"{WORK}/burst.go", f"{WORK}/burst.json"
        self.box.run("rm", "-f", trigger, out)
        self.reset(f"burst --lines {lines} --seconds {seconds} --trigger {trigger} --out {out}")
        seen = self.watch_status()
        self.start()
        invocation = self.wait_state("ready", timeout=60)["invocation_id"]
        daemon = self.main_pid(WATCHER)
        time.sleep(1)
        baseline = median([self.proc(daemon)["rss_kib"] for _ in range(3)])
        kinds_before = self.proc(daemon)["rss_kinds_kib"]
        self.box.run("touch", trigger)
        peak = baseline
        while not self.box.read(out):
            peak = max(peak, self.proc(daemon)["rss_kib"])
            time.sleep(0.1)
        times = json.loads(self.box.read(out) or "{}")
        drained = journal_final = None
        expected = -1
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            count = len(self.box.run("journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "json",
                                     check=False).stdout.splitlines())
            now = self.now()
            if count != expected:
                expected, journal_final = count, now
            status = self.status() or {}
            peak = max(peak, self.proc(daemon)["rss_kib"])
            if status.get("entries") == expected and drained is None:
                drained = now
            if drained is not None and now - journal_final > 1.0:
                break
            time.sleep(0.05)
        time.sleep(3)
        after = median([self.proc(daemon)["rss_kib"] for _ in range(3)])
        kinds_after = self.proc(daemon)["rss_kinds_kib"]
        status = self.status() or {}
        follow = self.latencies(seen, times["began"], times["ended"] + 60)
        return {"follow": follow, "rss_kinds_before_kib": kinds_before, "rss_kinds_after_kib": kinds_after,
                "lines": times.get("lines"), "write_seconds": times["ended"] - times["began"],
                "journal_entries": expected, "daemon_entries": status.get("entries"),
                "lost": expected - int(status.get("entries", 0)),
                "journal_done_after_s": journal_final - times["ended"] if journal_final else None,
                "daemon_done_after_s": drained - times["ended"] if drained else None,
                "rss_before_kib": baseline, "rss_peak_kib": peak, "rss_after_kib": after}


def journal_pages(box: Sandbox, lines: int) -> dict[str, Any]:
    """Journal pages a fresh reader maps at the end of the journal (bench/journal_pages.py), after
    one and after two writes of `lines` lines (the burst's size); three readers of each kind."""
    log("journal pages of a fresh reader at the journal's end")
    script = [f"{VENV}/bin/python", f"{REPO}/bench/journal_pages.py"]
    rounds = []
    for _ in range(2):
        cursor = box.run(*script, "write", str(lines), timeout=900).stdout.strip()
        rows = [json.loads(box.run(*script, how, cursor).stdout) for how in ("cursor", "tail") * 3]
        rows.append(json.loads(box.run(*script, "readall", cursor).stdout))
        size = box.run("sh", "-c", "du -b /var/log/journal/*/system.journal | cut -f1").stdout.strip()
        rounds.append({"journal_bytes": int(size or 0), "readers": rows})
    return {"rounds": rounds}


def all_journals(parts: set[str]) -> bool:
    """Whether these parts read every catch-up journal (not a single mix's alone: catchup_access,
    catchup_decode, each with profile or not)."""
    return bool(parts & {"catchup", "rebuild", "scale"}) or (
        "profile" in parts and not parts & {"catchup_access", "catchup_decode"})


def catchup_unit(n: int) -> str:
    return f"bench-catchup-{n}.service"


def crash_unit(n: int) -> str:
    return f"bench-crash-{n}.service"


def access_unit(n: int) -> str:
    return f"bench-access-{n}.service"


def decode_unit(n: int) -> str:
    return f"bench-decode-{n}.service"


def at(entry: dict[str, Any]) -> float:
    return int(entry["__REALTIME_TIMESTAMP"]) / 1e6


def message_bytes(entry: dict[str, Any]) -> bytes:
    """MESSAGE as journalctl -o json gives it: text, or a list of byte values (control characters)."""
    message = entry.get("MESSAGE")
    if isinstance(message, list):
        return bytes(message)
    return str(message or "").encode()


def parse_seconds(text: str) -> float:
    """systemd's time span as `systemctl show` prints it ("30s", "1min 30s", "500ms")."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
    total = 0.0
    for part in text.split():
        number = part.rstrip("abcdefghijklmnopqrstuvwxyz")
        total += float(number) * units[part[len(number):] or "s"]
    return total


def parse_strace(text: str) -> dict[str, int]:
    calls = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1] in ("poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait",
                                             "sendmsg", "recvmsg"):
            calls[parts[-1]] = int(parts[3])
    return calls


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small N, one repetition (the CI smoke run)")
    parser.add_argument("--out", type=Path, help="write results.json and performance.md here instead of "
                        "bench/ and docs/")
    parser.add_argument("--only", help="comma-separated parts: "
                        "catchup,rebuild,scale,profile,follow,action,idle,burst,pages (follow_steps: the journal -> "
                        "/status row alone; catchup_access, "
                        "catchup_decode: that mix's catch-up and rebuild rows alone, with profile its py-spy "
                        "summary too)")
    parser.add_argument("--reps", type=int, help="runs of each catch-up reader (default: 5, quick 1)")
    parser.add_argument("--before", help="a tree with its .venv (an older commit's worktree): its replay is "
                        "timed beside this tree's in every catch-up row, (g)")
    args = parser.parse_args()
    settings = dict(PROFILES["quick" if args.quick else "full"])
    if args.reps:
        settings["reps"] = args.reps
    if args.before:
        settings["before"] = str(Path(args.before).resolve())
    parts = set((args.only or "catchup,rebuild,scale,profile,follow,action,idle,burst,pages").split(","))
    box = BenchSandbox()
    box.boot()
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full", "settings": settings,
                               "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                                           "kernel": platform.release()},
                               "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    try:
        bench = Bench(box, settings)
        bench.install()
        if parts & {"catchup", "rebuild", "scale", "profile", "catchup_access"}:
            results["journal"] = bench.write_journals(parts)
        for mix, unit_of in (("access", access_unit), ("decode", decode_unit)):
            if f"catchup_{mix}" in parts and "catchup" not in parts:  # (one mix's rows alone)
                results[f"catchup_{mix}"] = bench.catchup(unit_of(settings["n"]))
                results[f"rebuild_{mix}"] = bench.rebuild(unit_of(settings["n"]))
                if "profile" in parts and settings["profile"]:
                    results[f"profile_{mix}"] = bench.profile(unit_of(settings["n"]))
        if "catchup" in parts:
            results["catchup"] = bench.catchup(catchup_unit(settings["n"]))
            results["catchup_crash"] = bench.catchup(crash_unit(settings["n"]))
            results["catchup_access"] = bench.catchup(access_unit(settings["n"]))
            results["catchup_decode"] = bench.catchup(decode_unit(settings["n"]))
        if "rebuild" in parts:
            results["rebuild"] = bench.rebuild(catchup_unit(settings["n"]))
            results["rebuild_crash"] = bench.rebuild(crash_unit(settings["n"]))
            results["rebuild_access"] = bench.rebuild(access_unit(settings["n"]))
            results["rebuild_decode"] = bench.rebuild(decode_unit(settings["n"]))
        if "scale" in parts:
            results["scale"] = bench.scale()
        if "profile" in parts and settings["profile"] and all_journals(parts):
            results["profile"] = bench.profile(catchup_unit(settings["n"]))
            results["profile_crash"] = bench.profile(crash_unit(settings["n"]))
            results["profile_decode"] = bench.profile(decode_unit(settings["n"]))
        if "follow" in parts or "follow_steps" in parts:
            results["follow_steps"] = bench.follow_steps()
        if "follow" in parts:
            results["follow"] = bench.follow()
            results["follow_rate"] = bench.follow_rate()
        if "action" in parts:
            results["action_idle"] = bench.action(busy=False)
            results["action_busy"] = bench.action(busy=True)
        if "idle" in parts:
            results["idle_rate"] = bench.idle_rate()
            results["idle_silent_ready"] = bench.idle_silent(starting=False)
            results["idle_silent_starting"] = bench.idle_silent(starting=True)
        if "burst" in parts:
            results["burst"] = bench.burst()
        if "pages" in parts:
            results["journal_pages"] = journal_pages(box, settings["burst_lines"])
    finally:
        box.shutdown()
    out_dir = args.out
    json_path = (out_dir / "results.json") if out_dir else HERE / "results.json"
    doc_path = (out_dir / "performance.md") if out_dir else REPO / "docs" / "performance.md"
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    doc_path.write_text(report.markdown(results))
    log(f"wrote {json_path} and {doc_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
