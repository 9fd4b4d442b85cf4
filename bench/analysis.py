"""The hand-written part of docs/performance.md: how to reproduce, and what the numbers mean."""

TEXT = """
## What the numbers mean

**1. Catch-up (missed).** The reference (a) is two C calls per entry (`_next()`, one
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

What the runs give, and how much of it a real journal keeps. The catch-up writer used to write its
300,000 lines in about 6 s with the wall clock in their prefixes, so nearly every line shared its
prefix second with the previous one: the C reader's runs and `fast_prefix`'s memo (keyed by the
whole prefix) hit almost always. On those journals the full run at 07:45 met every serving-heavy
target: 0.51 × (a), 1.02 × (b), 5.52 × (c) (crash-heavy 0.37 ×, 0.71 ×, 3.42 ×). A server writes
the same lines over hours: a busy SGLang prints a `Decode batch` line every 40 decode steps, a few a
second, with the HTTP server's access lines between them. The writer now gives its serving lines the
prefix times of a server writing 4 lines a second (`bench/writer.py`, `LINES_PER_SECOND`; 300,000
lines span about 21 hours), and with that the same code measured 0.34 × (a), 0.65 × (b), 3.66 × (c)
serving-heavy and 0.33 ×, 0.62 ×, 2.76 × crash-heavy (the target rows above; `superseded_catchup` in
results.json keeps the earlier rows). Runs now join a line with the next only within one prefix
second, and every new second costs `fast_prefix` a parse (`_epoch_of`, a `Prefix`). Outside the
sandbox, on a 308,000-entry journal of the integration test's generator with two `Decode` lines a
second: (a) 0.37 s, replay 2.2 s (0.17 ×), against 1.15 s when every line has the same prefix.

Where the time goes now (profile tables above, serving-heavy): reading in C 45 % (about 1.3 × the
raw reader's whole run: one `sd_journal_enumerate_data` walk over an entry's ~25 journald fields,
where (a) stops at MESSAGE, plus the tuples), the fast path's decisions about 30 %
(`FastPath.apply`, `fast_prefix`, dataclass construction), the loop 9 %, start-up 8 %. What would
reach 0.5 × (a) on a real journal: the fast path's recognition in C as well (the prefix, the
masked-text plan lookup and the state checks of the common case, handing Python only lines that
change something), runs that span prefix seconds (the fast path does not use a prefix's time, only
its date, rank and tags: an engine-given mask of the time digits would let C join a server's
consecutive `Decode` lines across seconds), and a cheaper walk than `enumerate_data` for the four
fields. Not done: seeking past a start-up that reached ready long ago. It would not stay exact:
after ready every entry can still matter (proof of life, a request's traceback, a rank's fatal
line, lines lost).

**6. Scale (met).** Time is a line in N plus a fixed part (the interpreter, imports and the
profile, about 0.3 s), so the time per entry falls as N grows; the verdict now asks what the target
says, that it does not grow (per entry at the largest N no more than 15 % above the smallest N's)
and that phasewatch's own memory does not grow (at the largest N no more than 25 % above the
smallest's). The previous verdict wanted every point within 15 % of a fitted line and the own
memory of all N within 25 % of each other: the full run before the change of the catch-up writer
missed both (the fixed part makes the small N sit above the line; the own memory wandered 14–22 MB
with no trend). `replay` streams the journal (`journal_source.UnitRecords`); its max RSS grows with
N as the raw reader's does: sd-journal's mapping of the journal files (a tmpfs here). The tracker
bounds what grows (16 start-ups, 200 texts per fatal record, the rule memo at 4,096 messages, the
splitter keeps one small state per PID).

**2. Follow latency (met).** journald tells followers that entries were appended only through
inotify, and posts such changes through a coalescing timer (`POST_CHANGE_TIMER_INTERVAL_USEC`,
250 ms, in journald-server.c): a bare reader waiting on the journal's fd (what `journalctl -f` does)
wakes 0.25–0.5 s after the write (reference row), while the entry is in the file within a
millisecond (polling row). So while the unit talks (an entry within the last 2 s) the daemon also
looks for entries every 50 ms (`stages/wakeups.py`), whatever the unit's state; a step reads for at
most 25 ms (`READ_TIME`) and, if entries are left, the next step comes at once; the tracker's views
are built once per change, the metrics view at most 4 times a second, `sd_notify` only on a change
or a ping. The first line after more than 2 s of silence (a start-up's first line, or any line
after a pause) still waits for journald's notification: looking every 50 ms while silent would be
the periodic wake-up target 4 forbids, and nothing cheaper tells a follower that an entry was
appended (journald writes through `mmap`, which inotify does not see). In the run above that is the
start-up's first line (198 ms, the row's max).

Why the start-up row's p99 was 224 ms in the previous full run: the bench, not the daemon. The paced
writer waits after each line for its two reference readers; its polling reader misses an entry now
and then (seen in 4 of 10 runs of the row, 1 line of 220, while the daemon showed the same line
within 30 ms), and the writer then waited up to 5 s before its next line. That line came after a
silence and waited, by design, for journald (0.43 s each time; per-line timestamps of the writer and
an `strace -tt` of the daemon: no look in that window because the unit had been silent for 5 s).
The writer now writes its next line within 2 s whatever its references do, and the row counts lines
written after a silence (0 above) and the reference's misses (1 above).

Found by this bench and fixed (a product bug, not a speed one): a daemon started while the journal
held no entry of the unit yet (a new unit, a fresh or vacuumed journal: the sandbox's first
start-up) lost a quick start-up's first lines. `JournalFollower.seek_tail` left sd-journal at the
tail with no entry to stand on, and systemd 252's reader then jumped to the last matching entry
when entries came, skipping all the earlier ones of that batch: the daemon saw the start-up stuck in
`launch` while `replay` of the same journal saw it serving. With no matching entry the reader now
starts at the head (the same place, without the jump); `tests/integration/test_follow_tail.py`
fails without the fix.

The price of the looks is CPU at 100 lines/s: about 23 steps a second instead of 4. This round made
a step cheaper: the status file written as bytes, its directory made only when missing; the current
start-up's id looked up without building the views after every batch read; rank sort keys, a
server's expected ranks and the start-up's history fingerprint (a sha256) computed once instead of
at every step. One 5-line step outside the sandbox 0.45 → 0.39 ms; in the sandbox 1.7 % → 1.5 % in
one `--only idle` run and 1.9 % in the full run above (0.9 % before the looks; target missed by
0.9 points). A profile of the daemon in the sandbox at 100 lines/s (`python -m cProfile` as its
`ExecStart`, 30 s) puts a step's time in reading and feeding its ~5 lines (about 40 %), the sinks
(status file, STATUS=, metrics: 25 %), judging (13 %) and rebuilding the views (10 %). What would
meet both targets: not rebuilding the views and not judging again at a step whose lines changed
nothing but last activity (an incremental view: the rank's and the start-up's last-line times
patched into the cached one), which leaves the status write; or looks every 80 ms (p99 would sit
near 85 ms, too close to the target on this shared machine).

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
line. In the full run above: silent start-up 12 wake-ups in 60 s for 16 due (4 pings and 12 samples,
a ping and a sample due together take one), silent and ready 4 for 4 pings (under strace: `poll` 3,
`sendmsg` 4), both met.
At 100 lines/s the daemon now takes a step every 50 ms instead of 4 a second (the price of
target 2): see the CPU row and section 2; the metrics HTTP server's thread sleeps until a request
comes.

**5. Burst (missed by 1.7 MB).** Nothing is lost, and the daemon was done 1.86 s after the writers
stopped, as soon as journald. Memory: while it reads a burst, sd-journal maps the pages of the
journal file it reads (`RssShmem` on this tmpfs, `RssFile` on a disk): about 21 MB per 50,000
entries (table). Once caught up after 10,000 entries the daemon reopens its reader at its cursor and
calls glibc's `malloc_trim(0)` (`JournalFeed.release_memory`; it is the reopen a journal rotation
already uses: nothing lost or read twice; `gc.collect()` gave nothing back). Above: RssAnon
24.3 → 24.7 MB, RssShmem 11.1 → 14.5 MB, +3.7 MB in all. The rest is the fresh reader itself:
put at the end of the journal, a reader with the daemon's match maps 2.3–2.5 MB of the file when
it seeks by cursor and 1.7–2.0 MB from the tail (`bench/journal_pages.py`, the daemon's own reader, table above; the
bisection over the file's entry arrays touches pages all over it). The reopen now goes from the
tail when the cursor is the journal's last entry (`JournalFollower.reopen`; test: a reopened reader
goes on after the last entry read, both ways). So "within 2 MB of the RSS before" is out of reach
for any process that keeps a reader positioned at the end of a journal that grew: what stays is
journald's file pages, shared and clean, which the kernel reclaims under pressure; the daemon's own
memory (`RssAnon`) is back within 0.4 MB. What would reach the letter of the target: closing the
reader while the unit is silent and reopening it when journald's inotify says the journal changed
(a second inotify watch on the journal directory; not done: the reopen costs the same mapping again
at the next line, and a reader that is not open cannot be woken by sd-journal's own fd).

## Reproduce

    make bench            # = bash scripts/bench.sh: apt fail2ban + strace, py-spy in .venv, then bench/run.py

`bench/run.py --quick --out DIR` is the short version CI runs (`tests/e2e/test_e2e_bench_smoke.py`).
`--only catchup,scale,profile,follow,action,idle,burst` runs some parts. The journal is written
live by `bench/writer.py` running as a unit inside the sandbox (not imported with
systemd-journal-remote), so every reader sees what journald really stores: one stream per unit,
`_PID` per rank process, `_LINE_BREAK=pid-change` pieces of tqdm frames, PID 1's entries. All four
readers read the same system journal with the same match, so the rows compare.
"""
