"""Runs (stages/s3_track/fastpath.py `repeats`, Pipeline.feed_run): consecutive lines of one writer that differ
only in digits, which the C journal reader hands over as one run, are taken at once by the fast path
only where that leaves every output and every piece of the stages' state as taking them line by line
does (and as the full path does). The runs here are grouped as the C reader groups them
(`fastpath_compare.runs_of`, checked against the reader itself in tests/integration)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import example, given, settings
from hypothesis import strategies as st

from fastpath_compare import assert_runs_agree, continues, runs_of
from fastpath_journals import STAMP, decode, journal, piece, prefixed, stamped_from, steps
from phasewatch.engines.sglang import TIME_DIGITS, fast_prefix
from phasewatch.profile.load import load_builtin_profile


def same_width(n: int) -> str:
    """A Decode line whose every number keeps its width, so that consecutive ones form a run."""
    return f"Decode batch, #running-req: {10 + n % 27}, #token: {48213 + n % 9000}, token usage: 0.{n % 90 + 10}, " \
           f"gen throughput (token/s): {1000 + n % 400}.{n % 90 + 10}, #queue-req: {n % 3}"


# Pieces that make runs: the same writer's lines, alike but for digits.
run_piece = st.one_of(
    st.tuples(st.sampled_from(["TP0", "TP1"]), st.lists(st.integers(0, 10_000).map(same_width), min_size=2,
                                                        max_size=30), st.just("run")),
    # the main process's access lines: a rule that tells digits apart (`others`) matches some
    # (200 or 400, v1 or v2: alike but for digits, told apart by those rules)
    st.tuples(st.none(), st.lists(st.integers(10_000, 65_000).map(
        lambda n: f'INFO:     127.0.0.1:{n} - "POST /{"generate" if n % 2 else f"v{n % 3}/chat/completions"} '
                  f'HTTP/1.1" {200 if n % 5 else 400} OK'), min_size=2, max_size=8), st.just("run")),
    # phase rules: the first line moves the start-up on (full path), the ones after may be quiet
    st.tuples(st.sampled_from(["TP0", "TP1"]), st.lists(st.integers(10, 99).map(
        lambda n: f"Load weight begin. avail mem={n}.12 GB"), min_size=2, max_size=4), st.just("run")),
    st.tuples(st.none(), st.lists(st.just("The server is fired up and ready to roll!"), min_size=2, max_size=4),
              st.just("run")),
    # TP0's process writes under TP1's tag too: the rank changes inside what is alike but for digits
    st.tuples(st.just("TP0"), st.lists(st.sampled_from([prefixed("TP0", same_width(7)), prefixed("TP1", same_width(7)),
                                                        prefixed("TP0", same_width(8))]), min_size=2, max_size=6),
              st.just("raw-run")),
)


def expand(pieces: list[tuple[str | None, object, str]]) -> list[tuple[str | None, str, str]]:
    out: list[tuple[str | None, str, str]] = []
    for rank, text, how in pieces:
        if how == "run":
            out += [(rank, line, "line") for line in text]  # type: ignore[attr-defined]
        elif how == "raw-run":
            out += [(rank, line, "raw") for line in text]  # type: ignore[attr-defined]
        else:
            out.append((rank, text, how))  # type: ignore[arg-type]
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(piece, run_piece, run_piece), max_size=40), steps, st.booleans(), stamped_from)
def test_runs_and_lines_one_by_one_agree_on_generated_journals(
        pieces: list[tuple[str | None, object, str]], step: list[float], startup: bool, start: float | None) -> None:
    assert_runs_agree(journal(expand(pieces), step, startup, start))


def test_a_run_goes_on_across_the_prefix_seconds_of_a_serving_journal() -> None:
    """A server's prefixes show its clock: runs of one writer go on across its seconds (not its date)."""
    pieces = [("TP0", same_width(n), "line") for n in range(400)]
    records = journal(pieces, [0.25], startup=True, stamped_from=1_780_012_700.0)  # past midnight at line ~390
    assert len({r.message[:21] for r in records[-400:]}) > 90  # (the prefix's time changed every 4 lines)
    grouped, in_runs = assert_runs_agree(records)
    assert in_runs >= 398 and grouped.taken >= 399
    lengths = [len(e) for e in runs_of(records) if isinstance(e, list)]
    assert len(lengths) == 2  # the date's change ends the first run


def test_a_serving_journal_in_runs_takes_them_at_once() -> None:
    pieces = []
    for k in range(200):
        pieces += [("TP0", same_width(n), "line") for n in range(k, k + 1 + k % 9)]
        pieces.append((None, f'INFO:     127.0.0.1:{40000 + k} - "POST /generate HTTP/1.1" 200 OK', "line"))
    records = journal(pieces, [0.001, 0.003, -0.002, 0.25])
    grouped, in_runs = assert_runs_agree(records)
    assert in_runs > 600 and grouped.taken >= len(pieces) - 2


def test_a_busy_servers_decode_lines_of_every_width_are_one_run_taken_at_once() -> None:
    """A busy server's numbers grow and shrink (`#running-req: 9` then `48`, `#token: 9813` then
    `112406`): its Decode lines are one run, and the fast path takes all of them at once, as the
    same lines one by one, whatever their digit-masked texts (each line's plan is looked up)."""
    pieces = [("TP0", decode(n * 7919 % 10_000), "line") for n in range(300)]
    for k in range(0, 300, 50):  # the main process's access line every 50
        pieces.insert(k, (None, f'INFO:     127.0.0.1:{40000 + k} - "POST /generate HTTP/1.1" 200 OK', "line"))
    records = journal(pieces, [0.25], startup=True)
    assert len({len(r.message) for r in records[-300:]}) > 5  # (of many widths)
    grouped, in_runs = assert_runs_agree(records)
    assert in_runs >= 290 and grouped.taken >= len(pieces) - 2


def test_a_run_past_the_record_ranks_bound_keeps_what_line_by_line_keeps() -> None:
    """The mapper's record -> rank map is cleared past 4096 records, inside a run as line by line."""
    pieces = [("TP0", same_width(n), "line") for n in range(4090)] + [(None, "asgi", "asgi")]
    pieces += [("TP1", same_width(n), "line") for n in range(4200)]
    records = journal(pieces, [0.001, 0.002])
    grouped, in_runs = assert_runs_agree(records)
    assert in_runs >= 8000
    assert len(grouped.state["mapper"]["_record_ranks"]) < 4096 - 8000 % 4096 + 200


def test_a_run_on_both_sides_of_a_phase_rule_agrees() -> None:
    """The ready line starts a run of its own: its first line moves the unit on, the rest are quiet."""
    ready = "The server is fired up and ready to roll!"
    records = journal([(None, ready, "line")] * 5 + [("TP0", same_width(1), "line")] * 5, [0.5, 0.001], startup=True)
    # (the start-up's own ready line is followed by five more of the same writer: one run of six)
    assert any(isinstance(entry, list) and len(entry) == 6 for entry in runs_of(records))
    assert_runs_agree(records)


def test_the_run_model_joins_what_differs_only_in_digits_after_the_head_or_in_the_time() -> None:
    line = prefixed("TP0", same_width(1)).encode()
    assert continues(line, prefixed("TP0", same_width(2)).encode())
    assert not continues(line, prefixed("TP1", same_width(1)).encode())  # the prefix (rank tag) differs
    later = line.replace(STAMP.encode(), b"2026-05-28 21:59:41")
    assert continues(line, later)  # its time of day may (sglang's `run_time_digits`)
    assert not continues(line, later, (0, 0))  # not for an engine without one
    assert not continues(line, line.replace(STAMP.encode(), b"2026-05-29 20:26:40"))  # its date may not
    with_ms = prefixed("TP0", same_width(1)).replace(STAMP, STAMP + ".123").encode()
    assert not continues(with_ms, with_ms.replace(b".123", b".124"))  # nor its milliseconds
    assert not continues(b"[2026-05-28 20:26:40 TP1] x", b"[2026-05-28 20:26:40 TP2] x")
    assert continues(line, prefixed("TP0", decode(1)).encode())  # numbers of other widths
    assert not continues(b"[x] 1a", b"[x] a") and not continues(b"[x] a1", b"[x] a")  # a number, not none
    assert not continues(b"[x]", b"[x]0") and continues(b"[x] a10 b", b"[x] a2 b")
    assert not continues(b"[x] 1a", b"[x] 1b") and continues(b"no bracket", b"no bracket")
    assert not continues(b"abc 1", b"abc 2")  # no ']': the whole line is its head
    # ids: alike once their hex is masked (3: the same text by ids; 2: of other widths)
    assert continues(b"[x] rid=deadbeef0 ok", b"[x] rid=cafe00123 ok") == 3
    assert continues(b"[x] rid=deadbeef0 ok", b"[x] rid=cafe001234 ok") == 2
    assert continues(b"[x] u=dead-beef-cafe", b"[x] u=0000-1111-face") == 3
    assert not continues(b"[x] rid=abcdef0", b"[x] rid=abcdef1x")  # (not an id: 7 hex; then other text)
    assert not continues(b"[x] rid=abcd ok", b"[x] rid=abce ok")  # four hex are no id
    assert not continues(b"[x] dead-beef ok", b"[x] dead-beee ok")  # nor hex joined once by '-'
    records = journal([("TP0", same_width(n), "line") for n in range(3)], [0.001], startup=False)
    assert [len(e) if isinstance(e, list) else 1 for e in runs_of(records)] == [1, 3]
    assert not runs_of([replace(records[1], line_break="pid-change"), records[2]])[0:1] == [[records[1], records[2]]]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["[2026-05-28 20:26:40 TP0] ", "[2026-05-28 20:26:40.123 DP1 TP3 EP3]", "[2026-05-28 20:26:40] ",
                        "[2026-05-28 20:26:40 TP12]  x", "[2026-05-28 20:26:40 TP", "[2026-05-28 2x:26:40 TP0] "]),
       st.lists(st.integers(0, 9), min_size=8, max_size=8), st.binary(max_size=12))
def test_a_fast_prefix_is_the_same_but_for_its_time_across_the_time_digits(head: str, digits: list[int],
                                                                           tail: bytes) -> None:
    """The engine contract that lets a run go on across seconds (Engine.run_time_digits)."""
    message = head.encode() + tail
    start, end = TIME_DIGITS
    other = bytearray(message)
    for position, digit in zip(range(start, end), digits, strict=True):
        if chr(other[position]).isdigit():
            other[position] = ord("0") + digit
    prefix, moved = fast_prefix(message), fast_prefix(bytes(other))
    if prefix is not None:
        assert moved is not None and replace(moved, ts=prefix.ts) == prefix


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["[2026-05-28 20:26:40 TP0] ", "[2026-05-28 20:26:40.123 DP1 TP3 EP3]", "[2026-05-28 20:26:40] ",
                        "[2026-05-28 20:26:40 TP12]  x", "[2026-05-28 20:26:40 TP"]),
       st.binary(max_size=12), st.binary(max_size=12))
@example("[2026-05-28 20:26:40.123 DP1 TP3 EP3]", b"", b" ")  # found in CI: ` ?` after `]` reads one byte more
def test_a_fast_prefix_follows_from_the_bytes_up_to_the_one_after_it(head: str, tail: bytes, other: bytes) -> None:
    """The engine contract a run relies on (engines/__init__.py): its lines share one prefix."""
    message = head.encode() + tail
    prefix = fast_prefix(message)
    if prefix is not None and len(message) > prefix.end:  # (a line that ends with its prefix is not repeated:
        assert fast_prefix(message[:prefix.end + 1] + other) == prefix  # FastPath.apply, `_head_length`)


# A config's own rule that tells digits apart and proves the server serving: only "200" answers do.
ANSWERED = load_builtin_profile("sglang").with_overrides([
    {"id": "answered", "event": "activity", "scope": "main", "proof_of_life": True, "match": r'" 200 OK$'}])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(10_000, 65_000), st.sampled_from([200, 400, 500]), st.integers(0, 3)),
                min_size=1, max_size=40), steps)
def test_a_digit_telling_rule_of_a_config_is_asked_line_by_line(
        answers: list[tuple[int, int, int]], step: list[float]) -> None:
    """Access lines alike but for digits, some of which that rule matches: its answer for one line
    is never carried to another (proof of life, by the fast path, in runs or not)."""
    pieces = []
    for port, status, decodes in answers:
        pieces.append((None, f'INFO:     127.0.0.1:{port} - "POST /generate HTTP/1.1" {status} OK', "line"))
        pieces += [("TP0", same_width(port + k), "line") for k in range(decodes)]
    grouped, _ = assert_runs_agree(journal(pieces, step), ANSWERED)
    assert grouped.taken > 0


# A config's own rule that is blind to which digits a line holds but not to how many: a queue of
# 100 requests or more is fatal (a config may say so; the built-in rules tell no widths apart).
LONG_QUEUE = load_builtin_profile("sglang").with_overrides([
    {"id": "long_queue", "event": "fatal", "scope": "rank", "cause": "python_exception",
     "match": r"#queue-req: \d\d\d"}])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([0, 7, 42, 130, 999, 1500]), min_size=2, max_size=30), steps)
@example([0, 130, 0], [0.25])
def test_a_run_of_other_widths_is_taken_only_as_far_as_each_lines_own_rules_go(
        queues: list[int], step: list[float]) -> None:
    """The lines of a run may hold numbers of other widths than its first line's, and a rule may
    tell widths apart: each line's own rules decide (here a fatal line inside a run), as line by line."""
    pieces = [("TP0", same_width(n).replace(f"#queue-req: {n % 3}", f"#queue-req: {queue}"), "line")
              for n, queue in enumerate(queues)]
    records = journal(pieces, step, startup=True)
    grouped, _ = assert_runs_agree(records, LONG_QUEUE)
    assert grouped.taken > 0
