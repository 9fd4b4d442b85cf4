import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasewatch.errors import InputError
from phasewatch.records import (
    MID_DEACTIVATED,
    MID_FAILED,
    MID_MAIN_EXITED,
    MID_RESTART_SCHEDULED,
    MID_STARTED,
    MID_STOPPED,
    MID_STOPPING,
    MID_SUPPRESSED,
    JournalRecord,
)
from phasewatch.sources.journal.formats import ParsedSource, parse_source

T0 = 1771804502.0  # 2026-02-22T23:55:02Z
NOT_TEXT = r"^input is not a journal export, journalctl JSON/text, or a text log: "
BLOB_WARNING = ("1 entry shown as '[... blob data]': lines journalctl did not print (control characters, "
                "a progress bar's frames), not lost: each is read as a sign of life at its time; to see them, "
                "re-export with journalctl -a (or -o json --all / -o export)")


def binary_field(key: bytes, value: bytes) -> bytes:
    return key + b"\n" + struct.pack("<Q", len(value)) + value + b"\n"


# --- empty ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"", b"\n", b"  \n\t\r\n", b"-- No entries --\n"])
def test_empty(data: bytes) -> None:
    assert parse_source(data) == ParsedSource("empty", (), ())


# --- export --------------------------------------------------------------------------------------


def test_export_text_and_binary_fields() -> None:
    data = (
        b"__CURSOR=s=abc;i=1\n__REALTIME_TIMESTAMP=1771804502250000\n_PID=4242\n"
        b"_SYSTEMD_INVOCATION_ID=0123456789abcdef0123456789abcdef\n_LINE_BREAK=pid-change\n"
        + binary_field(b"MESSAGE", b"\rLoading: 50%|#  | 1/2\r\nx\n")
        + b"MESSAGE=second copy is ignored\n\n"
        b"__CURSOR=s=abc;i=2\nMESSAGE=Started.\nMESSAGE_ID=39f53479-d3a0-45ac-8e11-786248231fbf\n"
        b"UNIT=sglang-kimi.service\nJOB_TYPE=start\n\n"
    )
    parsed = parse_source(data)
    assert parsed == ParsedSource("export", (
        JournalRecord(message=b"\rLoading: 50%|#  | 1/2\r\nx\n", realtime=1771804502.25, pid=4242,
                      invocation_id="0123456789abcdef0123456789abcdef", line_break="pid-change",
                      cursor="s=abc;i=1"),
        JournalRecord(message="Started.", message_id=MID_STARTED, unit="sglang-kimi.service",
                      cursor="s=abc;i=2", extra={"JOB_TYPE": "start"}),
    ), ())


def test_export_non_utf8_text_value_stays_bytes() -> None:
    parsed = parse_source(b"__CURSOR=c\nMESSAGE=caf\xe9\n")
    assert parsed.records == (JournalRecord(message=b"caf\xe9", cursor="c"),)


def test_export_bad_entry_is_skipped_with_warning() -> None:
    data = b"__CURSOR=a\nMESSAGE=one\n\n__CURSOR=b\nbad key=x\n\n__CURSOR=c\nMESSAGE=three\n"
    parsed = parse_source(data)
    assert [r.message for r in parsed.records] == ["one", "three"]
    assert parsed.warnings == (
        "1 export entries could not be parsed (first: byte 35: invalid field name b'bad key')",
    )


# --- JSON ----------------------------------------------------------------------------------------


def test_json_lines() -> None:
    lines = [
        {"__REALTIME_TIMESTAMP": "1771804502000000", "_PID": "7", "MESSAGE": "hello",
         "_SYSTEMD_INVOCATION_ID": "ab" * 16, "SYSLOG_IDENTIFIER": "python3"},
        {"_PID": "7", "MESSAGE": [13, 76, 111, 97, 100, 27, 91, 48, 109]},
        {"_PID": "8", "MESSAGE": None},
        {"MESSAGE": ["first", [50]], "UNIT": ["a.service", "b.service"], "MESSAGE_ID": [50, 51]},
    ]
    data = "\n".join(json.dumps(line) for line in lines).encode() + b"\n"
    parsed = parse_source(data)
    assert parsed.format == "json"
    assert parsed.records == (
        JournalRecord(message="hello", realtime=T0, pid=7, invocation_id="ab" * 16,
                      extra={"SYSLOG_IDENTIFIER": "python3"}),
        JournalRecord(message=b"\rLoad\x1b[0m", pid=7),
        JournalRecord(message=None, pid=8),
        JournalRecord(message="first", unit="a.service", message_id="23"),
    )
    assert parsed.warnings == (
        "1 entries have MESSAGE null (journalctl elides fields of 4096 bytes or more): "
        "re-export with journalctl -o json --all",
    )


def test_json_pretty_and_seq() -> None:
    pretty = b'{\n\t"MESSAGE" : "a",\n\t"_PID" : "1"\n}\n{\n\t"MESSAGE" : "b"\n}\n'
    seq = b'\x1e{"MESSAGE": "a", "_PID": "1"}\n\x1e{"MESSAGE": "b"}\n'
    expected = ParsedSource("json", (JournalRecord(message="a", pid=1), JournalRecord(message="b")), ())
    assert parse_source(pretty) == expected
    assert parse_source(seq) == expected


def test_json_bad_lines_are_counted() -> None:
    data = b'{"MESSAGE": "a"}\n{"MESSAGE": "b\n[1, 2]\n{"MESSAGE": "c"}\n'
    parsed = parse_source(data)
    assert [r.message for r in parsed.records] == ["a", "c"]
    assert parsed.warnings == (
        "2 JSON lines could not be parsed (first: line 2: Invalid control character at)",
    )


def test_json_bad_pretty_object_counts_once() -> None:
    data = b'{\n "MESSAGE": "a",\n "X": nope\n}\n{\n "MESSAGE": "b"\n}\n'
    parsed = parse_source(data)
    assert [r.message for r in parsed.records] == ["b"]
    assert parsed.warnings == ("1 JSON lines could not be parsed (first: line 1: Expecting value)",)


def test_json_nothing_parses() -> None:
    with pytest.raises(InputError, match=r"^input looks like journalctl JSON but no line parses as JSON "
                                         r"\(line 1: Expecting property name"):
        parse_source(b"{oops\n{also bad\n")


def test_json_without_message_field_warns() -> None:
    parsed = parse_source(b'{"level": "info", "n": 3}\n')
    assert parsed.records == (JournalRecord(message=None),)
    assert parsed.warnings == ("no JSON object has a MESSAGE field: is this journalctl -o json output?",)


# --- short* --------------------------------------------------------------------------------------


SHORT_ISO = b"""\
-- Logs begin at Sun 2026-02-22 00:00:00 UTC, end at Mon 2026-02-23 00:00:00 UTC. --
2026-02-22T23:55:02+0000 h systemd[1]: Starting sglang-kimi.service - SGLang Kimi...
2026-02-22T23:55:02+0000 h systemd[1]: Started sglang-kimi.service - SGLang Kimi.
2026-02-22T23:55:03+0000 h python3[4242]: Traceback (most recent call last):
""" + b" " * len(b"2026-02-22T23:55:03+0000 h python3[4242]: ") + b"""  File "x.py", line 1, in <module>
2026-02-22T23:55:04+0000 h python3[4243]: [87B blob data]
2026-02-22T23:55:05+0000 h systemd[1]: sglang-kimi.service: Main process exited, code=exited, status=1/FAILURE
2026-02-22T23:55:05+0000 h systemd[1]: sglang-kimi.service: Failed with result 'exit-code'.
2026-02-22T23:55:05+0000 h systemd[1]: sglang-kimi.service: Consumed 3.1s CPU time.
2026-02-22T23:55:10+0000 h systemd[1]: sglang-kimi.service: Scheduled restart job, restart counter is at 3.
2026-02-22T23:55:10+0000 h systemd[1]: Stopped sglang-kimi.service - SGLang Kimi.
-- Boot 0123456789abcdef0123456789abcdef --
2026-02-22T23:56:00+0000 h systemd[1]: Stopping SGLang Kimi...
2026-02-22T23:56:01+0000 h systemd[1]: sglang-kimi.service: Main process exited, code=killed, status=9/KILL
2026-02-22T23:56:01+0000 h systemd[1]: sglang-kimi.service: Deactivated successfully.
2026-02-22T23:56:01+0000 h systemd[1]: Stopped SGLang Kimi.
2026-02-22T23:56:02+0000 h systemd-journald[99]: Suppressed 22500 messages from sglang-kimi.service
2026-02-22T23:56:03+0000 h systemd[777]: Started sglang-kimi.service.
"""


def test_short_iso_with_systemd_lifecycle() -> None:
    unit = "sglang-kimi.service"
    sd = {"SYSLOG_IDENTIFIER": "systemd"}
    py = {"SYSLOG_IDENTIFIER": "python3"}
    parsed = parse_source(SHORT_ISO)
    assert parsed.format == "short-iso"
    assert parsed.records == (
        JournalRecord("Starting sglang-kimi.service - SGLang Kimi...", T0, 1, unit=unit, extra=sd),
        JournalRecord("Started sglang-kimi.service - SGLang Kimi.", T0, 1, message_id=MID_STARTED, unit=unit,
                      extra=sd),
        JournalRecord("Traceback (most recent call last):", T0 + 1, 4242, extra=py),
        JournalRecord('  File "x.py", line 1, in <module>', T0 + 1, 4242, extra=py),
        JournalRecord(None, T0 + 2, 4243, extra=py),
        JournalRecord("sglang-kimi.service: Main process exited, code=exited, status=1/FAILURE", T0 + 3, 1,
                      message_id=MID_MAIN_EXITED, unit=unit,
                      extra={**sd, "EXIT_CODE": "exited", "EXIT_STATUS": "1"}),
        JournalRecord("sglang-kimi.service: Failed with result 'exit-code'.", T0 + 3, 1,
                      message_id=MID_FAILED, unit=unit, extra={**sd, "UNIT_RESULT": "exit-code"}),
        JournalRecord("sglang-kimi.service: Consumed 3.1s CPU time.", T0 + 3, 1, unit=unit, extra=sd),
        JournalRecord("sglang-kimi.service: Scheduled restart job, restart counter is at 3.", T0 + 8, 1,
                      message_id=MID_RESTART_SCHEDULED, unit=unit, extra={**sd, "N_RESTARTS": "3"}),
        JournalRecord("Stopped sglang-kimi.service - SGLang Kimi.", T0 + 8, 1, message_id=MID_STOPPED,
                      unit=unit, extra=sd),
        JournalRecord("Stopping SGLang Kimi...", T0 + 58, 1, message_id=MID_STOPPING, extra=sd),
        JournalRecord("sglang-kimi.service: Main process exited, code=killed, status=9/KILL", T0 + 59, 1,
                      message_id=MID_MAIN_EXITED, unit=unit,
                      extra={**sd, "EXIT_CODE": "killed", "EXIT_STATUS": "9"}),
        JournalRecord("sglang-kimi.service: Deactivated successfully.", T0 + 59, 1,
                      message_id=MID_DEACTIVATED, unit=unit, extra=sd),
        JournalRecord("Stopped SGLang Kimi.", T0 + 59, 1, message_id=MID_STOPPED, extra=sd),
        JournalRecord("Suppressed 22500 messages from sglang-kimi.service", T0 + 60, 99,
                      message_id=MID_SUPPRESSED, object_unit=unit, n_dropped=22500,
                      extra={"SYSLOG_IDENTIFIER": "systemd-journald"}),
        JournalRecord("Started sglang-kimi.service.", T0 + 61, 777, extra=sd),
    )
    assert parsed.warnings == (BLOB_WARNING,)


@pytest.mark.parametrize(("line", "fmt", "realtime"), [
    (b"Feb 22 23:55:02 gpu1 sglang[5]: hi", "short", T0),
    (b"Feb 22 23:55:02.250000 gpu1 sglang[5]: hi", "short-precise", T0 + 0.25),
    (b"2026-02-22T23:55:02.250000+0000 h sglang[5]: hi", "short-iso", T0 + 0.25),
    (b"2026-02-23T01:55:02+02:00 gpu1 sglang[5]: hi", "short-iso", T0),
    (b"2026-02-22T23:55:02Z gpu1 sglang[5]: hi", "short-iso", T0),
    (b"Sun 2026-02-22 23:55:02 UTC gpu1 sglang[5]: hi", "short-full", T0),
    (b"1771804502.250000 gpu1 sglang[5]: hi", "short-unix", T0 + 0.25),
    (b"[ 1234.567890] gpu1 sglang[5]: hi", "short-monotonic", None),
])
def test_short_variants(line: bytes, fmt: str, realtime: float | None) -> None:
    parsed = parse_source(line + b"\n", default_year=2026)
    record = JournalRecord("hi", realtime, 5, extra={"SYSLOG_IDENTIFIER": "sglang"})
    yearless = (f"journalctl's {fmt} time stamps have no year and no line names one: read as 2026",)
    assert parsed == ParsedSource(fmt, (record,), yearless if fmt in ("short", "short-precise") else ())


def test_short_without_pid_or_hostname_and_year_rollover() -> None:
    data = b"Dec 31 23:59:59 kernel: a: b\nJan  1 00:00:00 host systemd: Stopping x.service...\n"
    parsed = parse_source(data, default_year=2025)
    assert parsed == ParsedSource("short", (
        JournalRecord("a: b", 1767225599.0, extra={"SYSLOG_IDENTIFIER": "kernel"}),
        JournalRecord("Stopping x.service...", 1767225600.0, message_id=MID_STOPPING, unit="x.service",
                      extra={"SYSLOG_IDENTIFIER": "systemd"}),
    ), ("journalctl's short time stamps have no year and no line names one: read as 2025",))


def test_short_full_unknown_zone_is_read_as_utc() -> None:
    parsed = parse_source(b"Sun 2026-02-22 23:55:02 CET h s[1]: x\n")
    assert parsed.records == (JournalRecord("x", T0, 1, extra={"SYSLOG_IDENTIFIER": "s"}),)
    assert parsed.warnings == ("times in time zone CET were read as UTC",)


# --- plain ---------------------------------------------------------------------------------------


def test_plain_keeps_carriage_returns() -> None:
    data = (b"[2026-02-22 23:55:02 TP0] Load weight begin.\n"
            b"\rLoading: 10%|#  | 1/10\rLoading: 20%|## | 2/10\r\n"
            b"\n"
            b"[87B blob data]\n"
            b"caf\xe9\n")
    assert parse_source(data) == ParsedSource("plain", (
        JournalRecord("[2026-02-22 23:55:02 TP0] Load weight begin."),
        JournalRecord("\rLoading: 10%|#  | 1/10\rLoading: 20%|## | 2/10\r"),
        JournalRecord(""),
        JournalRecord(None),
        JournalRecord("caf\ufffd"),
    ), (BLOB_WARNING,))


def test_mostly_plain_text_with_one_syslog_line_is_plain() -> None:
    data = b"Feb 22 23:55:02 h s[1]: x\nplain one\nplain two\n"
    assert parse_source(data).format == "plain"


# --- garbage -------------------------------------------------------------------------------------


def test_garbage_is_rejected() -> None:
    data = b"\x01\x02" * 45 + b"some text\n"
    with pytest.raises(InputError, match=NOT_TEXT + r"90% of it is binary$"):
        parse_source(data)


def test_nul_bytes_are_rejected() -> None:
    with pytest.raises(InputError, match=NOT_TEXT + r"it contains NUL bytes \(first at character 3\)$"):
        parse_source(b"abc\x00def\n")


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.binary(max_size=300),
    st.builds(lambda prefix, rest: prefix + rest,
              st.sampled_from([b"{", b"\x1e{", b"__CURSOR=x\n", b"MESSAGE\n", b"Feb 22 23:55:02 h s[1]: ",
                               b"2026-02-22T23:55:02+0000 h systemd[1]: ", b"[ 1.5] h s: "]),
              st.binary(max_size=200)),
))
def test_only_input_error_escapes(data: bytes) -> None:
    try:
        parsed = parse_source(data)
    except InputError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert all(isinstance(r, JournalRecord) for r in parsed.records)


@pytest.mark.parametrize("fmt", ["short", "short-precise"])
def test_a_short_stamps_year_is_the_one_a_line_of_that_day_names(fmt: str) -> None:
    frac = ".250000" if fmt == "short-precise" else ""
    data = (f"Mar 01 10:40:10{frac} llm-two sglang-kimi[9]: [2024-03-01 10:40:10 TP0] Load weight begin.\n"
            f"Mar 01 10:49:20{frac} llm-two sglang-kimi[9]: [87B blob data]\n").encode()
    parsed = parse_source(data, default_year=2026)
    assert [r.realtime for r in parsed.records] == [1709289610.0 + (0.25 if frac else 0), 1709290160.0 +
                                                    (0.25 if frac else 0)]
    assert not any("no year" in w for w in parsed.warnings)


def test_a_year_named_after_the_turn_of_the_year_dates_the_lines_before_it() -> None:
    data = (b"Dec 31 23:59:59 h sglang-kimi[9]: [2024-12-31 23:59:59 TP0] a\n"
            b"Jan 01 00:00:01 h sglang-kimi[9]: b\n")
    assert parse_source(data, default_year=2030).records[0].realtime == 1735689599.0  # 2024-12-31T23:59:59Z
    later = (b"Dec 31 23:59:59 h sglang-kimi[9]: a\n"
             b"Jan 01 00:00:01 h sglang-kimi[9]: [2025-01-01 00:00:01 TP0] b\n")
    assert parse_source(later, default_year=2030).records[0].realtime == 1735689599.0
    other_day = b"Mar 01 10:40:10 h sglang-kimi[9]: a file of 2019-07-04 12:00:00\n"
    parsed = parse_source(other_day, default_year=2026)
    assert parsed.warnings == ("journalctl's short time stamps have no year and no line names one: read as 2026",)
