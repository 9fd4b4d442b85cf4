"""The hand-written part of docs/performance.md: how to reproduce, and what the numbers mean."""

TEXT = """
## What the numbers mean

**1. Catch-up (missed, closer).** The reference (a) is two C calls per entry (`_next()`, one
`_get("MESSAGE")`). The catch-up path is now, step by step:

- *Reading, in C.* `replay --unit` reads the journal with a small C module of the package
  (`phasewatch/_journal_lines.c`, built by `setup.py` against libsystemd; `phasewatch --version`
  says which reader is in use): the same sd-journal match and data threshold as the daemon's
  `JournalFollower`, one `sd_journal_enumerate_data` walk per entry, a batch of 4,096 entries per
  call. A whole line of the unit's own processes (`_SYSTEMD_UNIT`, `MESSAGE`, `_PID`,
  `_SYSTEMD_INVOCATION_ID` once each, no `_LINE_BREAK`) comes back as a tuple (MESSAGE bytes, time,
  PID, invocation; the previous invocation's str reused) for `Pipeline.feed_line`; everything else
  (PID 1's entries, journald's notices, `_LINE_BREAK` pieces, a field given twice) as a dict of the
  fields the record needs, which Python makes into a record exactly as `JournalFollower.read`
  does. Without the module (a build without a compiler, or `PHASEWATCH_PURE_PYTHON=1`, as the
  `Architecture: all` Debian package is built) the same entries are read with systemd-python's
  `_get_all()`. Reading alone went from about 2 × (a)'s time to about 1.1–1.2 × (the test journals below).
- *Runs.* The C reader also joins consecutive lines of one writer that are the same but for digits
  (same length, the same bytes up to the first `]` and two more: the SGLang prefix and its time,
  digits free after that) into one run; `Pipeline.feed_run` gives the first line to the fast path
  and, when it took it, the rest at once (`FastPath.apply`'s `repeats`): the same masked text and
  prefix mean the same rules and the same state met, so the changes of N lines are those of one
  with the counters advanced by N, the record → rank memo filled (and cleared at 4,096) as line by
  line, the last line's time, the latest time, and each phase's longest gap between consecutive
  lines. A run is not joined where a rule that tells digits apart matches (the access lines).
- *The fast path* (`stages/fastpath.py`). Most entries of a serving journal change nothing but a
  rank's last activity. The fast path recognises them from the MESSAGE bytes and makes those
  changes itself, without `Line`, `Prefix` or `Event` objects: the engine module's `fast_prefix`
  reads the prefix (SGLang: its dated `[date time TPn]` form, one compiled bytes pattern), and
  the rest of the line, digit-masked (one entry for every `Decode batch` line), is looked up in a
  memo that says once per masked text which of the profile's rules it matches, whether it is one
  line of ASCII without a second prefix or escape, and whether it opens a traceback. The line
  qualifies when every rule it matches is an `activity` rule or a phase rule of a unit phase the
  start-up has already passed (after `serving`: `decode_batch`, `prefill_batch`, the access-log
  rules), or when no rule and no family word matches it (a plain sign of life), and when its
  writer, start-up and rank are already known. Then it does what the three stages would have done:
  the splitter's writer order, record number, rank, traceback flag, last date and time; the
  mapper's sets of tagged invocations and its record → rank memo; the tracker's last line,
  the rank's last activity and longest silence, and the proof of life of a `proof_of_life` rule.
  Anything else (a phase move, a new rank or writer, a fatal or `harmless` rule, a held
  fragment, a multi-line or non-ASCII entry, a family match) takes the stages. Which lines
  qualify is data: the profile's rules and the state decide; no SGLang text is in the code. The
  vLLM module has no `fast_prefix` yet (its prefix grammar has more forms), so vLLM journals take
  the full path. The daemon gets the fast path too (`Pipeline.feed`), `replay --rules` does not.
- *Long lines* (the crash-heavy shape: KB-long batch dumps and out-of-memory lines are longer
  than the 1,024 characters the rule memo keeps): they have a digit-masked memo of their own,
  bounded by the size of its keys (2 MiB), so a batch dump seen again with other numbers costs one
  lookup; a new one is searched only by the rules whose literal texts it holds (`events.needles`).
- *Start-up.* The built-in profile is read with libyaml's loader (the same document as
  `safe_load`'s), and `status`'s HTTP client is imported when it asks the daemon, not when the
  command line is parsed.
- *Exact.* `tests/unit/test_fastpath.py` feeds generated serving-heavy and crash-heavy journals
  (hypothesis: Decode, Prefill and access lines, ASGI tracebacks, long lines, fatal tracebacks,
  `_LINE_BREAK` pieces, lines with `\\r`, escapes or bad UTF-8, restarts, clock steps) through a
  pipeline with and one without the fast path and compares the transitions, the snapshot, the
  judged JSON and the stages' own state; `tests/unit/test_fastpath_runs.py` does the same with
  runs (through phase rules, rank changes, digit-telling rules, past the 4,096 bound) against line
  by line and the full path, and tests/integration checks the C reader's runs against that model
  and runs every journal test with both readers. `tests/golden/test_fastpath_corpus.py` does the same for
  every corpus log as journal entries; `tests/integration/test_fastpath_journal.py` compares
  `replay --unit --directory --json` (output, warnings, snapshot) with and without it over real
  journal files of both shapes. `replay --json` over the 87 corpus logs and the examples is the
  same as on main, byte for byte.

The full run above is in the tables. While the work was done, `bash scripts/bench.sh --only catchup,profile` gave (three runs on this shared machine,
300,000 entries each; ratios in the same run; the spread is the machine's): serving-heavy 0.22–0.38 ×
(a), 0.34–0.58 × (b), 2.2–3.1 × (c), where it was 0.12 ×, 0.22 ×, 1.12 ×; crash-heavy 0.20–0.22 ×
(a), 0.22–0.42 × (b), 2.1–2.3 × (c), where it was 0.07 ×, 0.12 ×, 0.78 × (the first run, before
the long-line change). The profile: reading is now about half of the time, the fast path about a
quarter, the interpreter and the profile's start-up about a tenth. So 0.5 × (a) stays out of reach
in Python: reading the four fields a line needs costs about 1.5–2 × what (a) spends on one, before
any work. What would reach it: the reading and the bytes-level recognition in C (one
`sd_journal_enumerate_data` walk per entry handing over only the four fields, or a C module that
runs the fast path's checks), leaving Python only the lines that change something. Not done:
seeking past a start-up that reached ready long ago. It would not stay exact: after ready every
entry can still matter (proof of life, a request's traceback, a rank's fatal line, lines lost);
the fast path takes the parsing out of those entries instead.

Then the reading went to C, with runs, the long-line memo and a shorter start-up (above). Measured
as whole processes on the shared 2-core machine with `/usr/bin/time`, 5 runs each, medians, on
journals of the generator of `tests/integration/test_fastpath_journal.py` written by
systemd-journal-remote (308,167 entries serving-heavy, 107,427 crash-heavy; one start-up each):
serving-heavy (a) 0.39 s, replay 1.91 s before, 1.16 s now (0.20 × → 0.34 × (a)); crash-heavy
(a) 0.24 s, replay 1.28 s before, 0.77 s now (0.19 × → 0.31 ×). With `PHASEWATCH_PURE_PYTHON=1`
(the systemd-python reader, no runs) 1.81 s and 0.99 s. Of the serving-heavy 1.16 s: about
0.15 s start-up (interpreter, imports, the profile's patterns), 0.40–0.45 s reading (the C
reader alone is within 10–20 % of (a): both are mostly sd-journal's own work), 0.55–0.6 s the
pipeline: 91,000 fast-path decisions of about 2.4 µs each (the runs took the other 200,000 lines
at about 1 µs a run), 12,000 lines of the full path (tracebacks, `_LINE_BREAK` pieces), the
access lines' digit-telling rules. So 0.5 × (a) is still missed: reading alone leaves about 0.4 s
of the 0.8 s budget, and the pipeline's per-decision cost in Python is the rest of the gap. What
would close it: the fast path's recognition in C too (prefix, masked-text plan lookup and the
state checks for the common case), or runs that span lines of several widths (measured: only a
quarter fewer decisions here, each line's plan then checked in Python).

**6. Scale (met).** Time is a line in N (the fixed part is the interpreter, imports and the
profile, about 0.3 s). Memory: `replay` used to hold every record (`list(read_unit(...))`). It
now streams the journal (`journal_source.UnitRecords`). Its max RSS still grows with N, but so does
the raw reader's by the same amount: that is sd-journal's mapping of the journal files (a tmpfs
here). The memory of phasewatch itself, the difference, stays at about 19 MB from 30,000 to
1,000,000 entries. The tracker bounds what grows (16 start-ups, 200 texts per fatal record, the rule memo at
4,096 messages, the splitter keeps one small state per PID).

**2. Follow latency.** journald tells followers that entries were appended only through inotify,
and posts such changes through a coalescing timer (`POST_CHANGE_TIMER_INTERVAL_USEC`, 250 ms, in
journald-server.c): a bare reader waiting on the journal's fd (what `journalctl -f` does) wakes
0.25–0.5 s after the write (reference row), while the entry is in the file within a millisecond
(polling row). So while the unit talks (an entry within the last 2 s) the daemon also looks for
entries every 50 ms (`stages/wakeups.py`); a look that finds nothing costs a `poll` and a `_next()`.
Measured before this work, on the same writer and machine: a start-up's lines p50 24 ms, p99 52 ms
(the 388 ms of the older full run did not come back in two runs of main; at least 1 % of its lines
had waited for journald's notification; its cause is not known, and the loop has been rebuilt since); 100 `Decode batch`
lines/s after ready p50 128 ms, p99 256 ms; the burst p50 1.27 s, p99 1.80 s. The causes, found by
these rows: (1) the looks were made only while the start-up was `starting`: after ready the daemon
kept journald's cadence; (2) a step read up to 10,000 entries (about 0.3 s of work under the burst)
before it published anything, and when it stopped on that bound the next step still waited for
journald's notification instead of coming at once. Now the looks are made whatever the state,
a step reads for at most 25 ms (`READ_TIME`, sources/journal_feed.py) and, if entries are left,
the next step comes at once. What made the extra steps affordable: the tracker's views were
rebuilt about a dozen times per step (every source, the policy and every sink asked for a snapshot
of all 16 kept start-ups); they are now built once per change (`Tracker.snapshot`, dropped by
`apply`); the status file is encoded with `json.dumps` instead of the pure-Python streaming
encoder; the metrics exporter's view is rebuilt at most 4 times a second (`PUBLISH_SPACING`, with
a deadline so the last change is published); `sd_notify` is sent only when the STATUS= line
changed or the watchdog ping is due. One step that reads 5 lines, outside the sandbox: 3.0 ms →
1.9 ms with the views cached (status file on a disk), and on a tmpfs 0.55 ms → 0.29 ms with the
publish spacing and `json.dumps`. In the run of 2026-11-30 04:44 (`--only
follow,idle,burst`, before the merge with the catch-up fast path): a start-up's lines p50 29 ms,
p99 54 ms; 100 lines/s p50 23 ms, p99 52 ms (met); the burst p50 75 ms, p99 145 ms (missed by
45 ms: the daemon reads the burst about as fast as journald stores it, 1.9 s after the writers
stopped both were done, so an entry waits behind those before it; a cheaper entry, the catch-up
fast path, is what would lower it). The price is CPU at 100 lines/s: 20 steps a second instead of
4, 2.3 % of a core in that run (0.9 % before; target 4 missed by it); what would meet both: a
step that costs less than the 0.5 ms it takes there (the status file is written and the tracker's
views rebuilt at every step that read an entry). The first line after more than 2 s of silence still
waits for journald (0.25–0.5 s): looking every 50 ms while silent would be the periodic wake-up
target 4 forbids; nothing cheaper tells a follower that an entry was appended (journald writes
through `mmap`, which inotify does not see).

**3. Action latency (met).** The loop sleeps exactly until the policy's next deadline (+50 ms),
so a deadline is acted on within about 60 ms whether the daemon is idle or reading 100 lines/s:
alert entry, then `RestartUnit` over D-Bus, then PID 1 stops the unit (the simulated unit dies on
SIGTERM at once; a real SGLang takes its `TimeoutStopSec=`).

**4. Idle cost.** With no lines the main loop wakes only for its own reasons: the watchdog
(every WatchdogSec/2 = 15 s), the signs-of-life sampling while a start-up runs (every
`vitals.period`, 5 s by default, shown in the table) and the policy's deadlines. The bench computes
that expected count from the config beside the measured one. The 1 s cgroup scan for rank
processes is gone: the cgroup is read when there is reason to (`sources/unit_processes.py`): at a
new start-up, and when the journal shows a `_PID` that is not a watched rank (a new process
talking, the main process, or a container client relaying its server), at most once a second;
a watched rank's death comes through its pidfd. `cgroup.events` was checked as a trigger and is
none: in the sandbox (cgroup v2 beside v1, systemd 252) it changed when the unit's cgroup became
populated or empty, never when a process forked or joined an already populated cgroup. A rank that
dies before printing a line is left to the log (the parent's traceback, or a stall). The looks for
entries stop 2 s after the last entry, so a silent window is measured from 3 s after the last
line. In the run of 2026-11-30 04:44: silent start-up 17 wake-ups in 60 s for 16 due (4 pings +
12 samples), met; silent and ready 8 for 4 pings (under strace: `poll` 7, `sendmsg` 4; a separate
`strace -tt` of the same scenario showed one `poll` per ping and nothing else, so the extra ones
were most likely the journal's fd, which wakes a follower for any unit's entries; not confirmed).
At 100 lines/s the daemon now takes a step every 50 ms instead of 4 a second (the price of
target 2): see the CPU row and section 2; the metrics HTTP server's thread sleeps until a request
comes.

**5. Burst.** Nothing is lost. RSS grew by about 23 MB in the burst and stayed there; by kind
(`/proc/PID/status`), it was `RssShmem`: the pages of the journal files (a tmpfs here) that
sd-journal mapped while reading the burst's entries; `RssAnon` moved by 0.4 MB. Each option,
measured alone on the 50,000-line burst (`--only burst`, RSS after minus before): nothing +22.5 MB;
`gc.collect()` +23.0 MB; glibc `malloc_trim(0)` +22.6 MB (anon −0.1 MB instead of +0.4 MB);
closing and reopening the journal reader at its cursor +1.7 MB. The daemon now does the reopen and
the trim once it has caught up after 10,000 entries (`JournalFeed.release_memory`; nothing lost or
read twice: it is the reopen that a journal rotation already uses), so at 100 lines/s once every
100 s. Smaller reads (250 entries, at most 25 ms per step) also lower the peak. In the run of
2026-11-30 04:44: RSS 43.3 → 53.1 → 44.0 MB, +0.7 MB (met).

## Reproduce

    make bench            # = bash scripts/bench.sh: apt fail2ban + strace, py-spy in .venv, then bench/run.py

`bench/run.py --quick --out DIR` is the short version CI runs (`tests/e2e/test_e2e_bench_smoke.py`).
`--only catchup,scale,profile,follow,action,idle,burst` runs some parts. The journal is written
live by `bench/writer.py` running as a unit inside the sandbox (not imported with
systemd-journal-remote), so every reader sees what journald really stores: one stream per unit,
`_PID` per rank process, `_LINE_BREAK=pid-change` pieces of tqdm frames, PID 1's entries. All four
readers read the same system journal with the same match, so the rows compare.
"""
