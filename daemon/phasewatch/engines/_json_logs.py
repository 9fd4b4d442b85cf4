"""vLLM's JSON logs (its logging config with a JSON formatter): one object a line, with `asctime`,
`levelname`, `name`, `message`, `processName`, `process`, `vllm_process_name`, `vllm_pid` (and
`filename`, `lineno`, `exc_info` when the formatter gives them). Such a line passes vLLM's process
prefix by, so it is turned into the line vLLM's own text format would have printed, prefix and
header included: `(Worker_TP1 pid=8) INFO 03-01 10:03:00 [gpu_worker.py:298] message`. Pure."""

from __future__ import annotations

import json
import re

MAX_JSON_CHARS = 1 << 20  # a longer object is no log record of ours: left as it is
_TIME_RE = re.compile(r"(?:\d{4}-)?(\d\d-\d\d)[ T](\d\d:\d\d:\d\d)")
_NAME_RE = re.compile(r"[\w.-]{1,64}(?: rank=\d{1,6})?")  # a process name as the text prefix shows it
_LEVELS = frozenset({"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"})


def text_of_json_line(message: str) -> str | None:
    """The text form of one JSON log record, or None when `message` is not one."""
    if not message.startswith("{") or '"message"' not in message or len(message) > MAX_JSON_CHARS:
        return None
    try:
        record = json.loads(message)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("message"), str):
        return None
    level = str(record.get("levelname") or "INFO")
    if level not in _LEVELS:
        return None
    name = str(record.get("vllm_process_name") or record.get("processName") or "").rsplit("::", 1)[-1]
    pid = record.get("vllm_pid") or record.get("process")
    tag = f"({name} pid={pid}) " if _NAME_RE.fullmatch(name) and name != "MainProcess" and isinstance(pid, int) \
        else ""
    when = _TIME_RE.match(str(record.get("asctime") or ""))
    filename, lineno = record.get("filename"), record.get("lineno")
    if not (isinstance(filename, str) and _NAME_RE.fullmatch(filename)):
        filename = str(record.get("name") or "vllm").rsplit(".", 1)[-1] + ".py"  # the logger's module
    source = f"{filename}:{lineno if isinstance(lineno, int) else 1}"
    head = f"{level} {when.group(1)} {when.group(2)} [{source}] " if when else ""
    text = record["message"]
    if isinstance(record.get("exc_info"), str) and record["exc_info"]:
        text += "\n" + record["exc_info"]
    return "\n".join(f"{tag}{head if index == 0 else ''}{line}" for index, line in enumerate(text.split("\n")))
