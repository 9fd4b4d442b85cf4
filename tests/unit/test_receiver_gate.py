"""The webhook receiver's admission and refusal log (sources/receiver/receiver_gate.py), and the sockets
systemd passes (sources/receiver/listen_fds.py): the time passed in, nothing slept."""

from __future__ import annotations

from phasewatch.sources.receiver.listen_fds import passed_fds
from phasewatch.sources.receiver.receiver_gate import Gate, RefusalLog

ROOT, STRANGER, OTHER = "uid 0", "uid 65534", "host 10.0.0.9"


def test_one_peer_holds_at_most_its_share_and_the_kept_slots_are_for_token_holders() -> None:
    gate = Gate(total=10, per_peer=4, kept=2)
    assert [gate.take(STRANGER, 0.0) for _ in range(5)] == [True] * 4 + [False]
    assert [gate.take(OTHER, 0.0) for _ in range(5)] == [True] * 4 + [False]
    assert gate.take(ROOT, 0.0) is False  # 8 in use: the last 2 are kept
    gate.trust(ROOT, 1.0)
    assert [gate.take(ROOT, 2.0) for _ in range(3)] == [True, True, False]
    gate.give_back(STRANGER)
    assert gate.take(STRANGER, 2.0) is False  # (10 in use)
    gate.give_back(ROOT)
    assert gate.take(STRANGER, 2.0) is False and gate.take(ROOT, 2.0) is True


def test_trust_fades() -> None:
    gate = Gate(total=2, per_peer=2, kept=1, trusted_for=100.0)
    assert gate.take(STRANGER, 0.0)
    gate.trust(ROOT, 0.0)
    assert gate.take(ROOT, 100.0)
    gate.give_back(ROOT)
    assert not gate.take(ROOT, 100.5)


def test_a_flood_of_refusals_is_one_line_a_minute_per_reason_saying_how_many() -> None:
    log = RefusalLog(every=60.0)
    lines = [log.line("no_token", STRANGER, t * 0.01) for t in range(1000)]
    assert [line for line in lines if line] == ["webhook request from uid 65534 refused: no_token"]
    assert log.line("busy", OTHER, 5.0) == "webhook request from host 10.0.0.9 refused: busy"
    assert log.line("no_token", STRANGER, 61.0) == ("webhook request from uid 65534 refused: no_token "
                                                    "(999 more refused as no_token since the last such line, 61s ago)")
    assert log.line("no_token", STRANGER, 62.0) is None
    assert log.line("no_token", STRANGER, 200.0) == ("webhook request from uid 65534 refused: no_token "
                                                     "(1 more refused as no_token since the last such line, 139s ago)")


def test_sockets_passed_by_systemd_are_read_by_name_and_the_variables_taken_away() -> None:
    environ = {"LISTEN_PID": "42", "LISTEN_FDS": "2", "LISTEN_FDNAMES": "metrics:receiver", "PATH": "/bin"}
    assert passed_fds(environ, 42) == {"metrics": [3], "receiver": [4]}
    assert environ == {"PATH": "/bin"}
    assert passed_fds({"LISTEN_PID": "42", "LISTEN_FDS": "1"}, 42) == {"unknown": [3]}
    assert passed_fds({"LISTEN_PID": "41", "LISTEN_FDS": "1"}, 42) == {}  # another process's
    assert passed_fds({"LISTEN_PID": "x", "LISTEN_FDS": "1"}, 42) == {}
    assert passed_fds({}, 42) == {}


def test_an_ipv4_peer_of_a_dual_stack_socket_is_looked_up_as_ipv4() -> None:
    from phasewatch.sources.receiver.receiver_http import unmapped

    assert unmapped(("::ffff:127.0.0.1", 40000, 0, 0)) == ("127.0.0.1", 40000)
    assert unmapped(("::1", 40000, 0, 0)) == ("::1", 40000, 0, 0)
    assert unmapped(("10.0.0.7", 5)) == ("10.0.0.7", 5)
