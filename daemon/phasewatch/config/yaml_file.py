"""A config (or profile) file read safely: small, plain, shallow YAML whose values remember their
line, so that every error names the key, the file and the line."""

from __future__ import annotations

import os
import stat
from typing import Any

import yaml

from ..durations import shown
from ..errors import ConfigError

# What a config file may be: small, plain, shallow. Beyond these the loader refuses (exit 78) before
# any value is built, so no file can cost more than reading its own bytes.
MAX_CONFIG_BYTES = 1 << 20
MAX_DEPTH = 16
MAX_NUMBER_CHARS = 20
MAX_ALIASES = 64


class _Refused(Exception):
    """The loader met something a config may not contain; `key` and `line` say where."""

    def __init__(self, key: str, message: str, line: int | None) -> None:
        super().__init__(message)
        self.key, self.message, self.line = key, message, line


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of every mapping key and refuses, while composing, what
    could make loading cost more than the file's size: aliases of lists or mappings (they expand),
    nesting deeper than MAX_DEPTH; then, before building values: keys that are not plain scalars,
    duplicate keys, numbers longer than MAX_NUMBER_CHARS."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.key_path: list[str] = []
        self.aliases = 0

    def where(self) -> str:
        return ".".join(self.key_path).replace(".[", "[") or "config"

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        label = index.value if isinstance(index, yaml.ScalarNode) else f"[{index}]" if isinstance(index, int) else None
        if label is not None:
            self.key_path.append(str(label))
        try:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise _Refused(self.where(), f"more than {MAX_ALIASES} aliases", event.start_mark.line + 1)
                target = self.anchors.get(event.anchor)
                if target is not None and not isinstance(target, yaml.ScalarNode):
                    raise _Refused(self.where(), f"alias *{shown(event.anchor)[1:-1]} of a list or mapping refused "
                                   "(aliases that expand are not allowed in a config)", event.start_mark.line + 1)
            elif len(self.key_path) >= MAX_DEPTH:
                raise _Refused(self.where(), f"nested deeper than {MAX_DEPTH} levels",
                               self.peek_event().start_mark.line + 1)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)  # type: ignore[arg-type]  # a key node, per PyYAML
        finally:
            if label is not None:
                self.key_path.pop()


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _check_nodes(node: yaml.Node, key: str) -> None:
    """Refuse what would raise or blow up while building values (iterative: depth is bounded anyway)."""
    pending: list[tuple[yaml.Node, str]] = [(node, key)]
    seen: set[int] = set()
    while pending:
        node, key = pending.pop()
        if id(node) in seen:
            continue  # a scalar alias: checked once
        seen.add(id(node))
        line = node.start_mark.line + 1
        if isinstance(node, yaml.ScalarNode):
            if node.tag in _NUMBER_TAGS and len(node.value) > MAX_NUMBER_CHARS:
                raise _Refused(key, f"number of {len(node.value)} characters refused "
                               f"(at most {MAX_NUMBER_CHARS})", line)
        elif isinstance(node, yaml.SequenceNode):
            pending.extend((item, f"{key}[{i}]") for i, item in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key_node, value_node in node.value:
                key_line = key_node.start_mark.line + 1
                if not isinstance(key_node, yaml.ScalarNode):
                    raise _Refused(key, "a key must be a plain name, not a list or mapping", key_line)
                child = key_node.value if key == "config" else f"{key}.{key_node.value}"
                if key_node.tag in _NUMBER_TAGS and len(key_node.value) > MAX_NUMBER_CHARS:
                    raise _Refused(key, "number key too long", key_line)
                if key_node.value in first and key_node.tag != "tag:yaml.org,2002:merge":
                    raise _Refused(child, f"duplicate key (first at line {first[key_node.value]})", key_line)
                first.setdefault(key_node.value, key_line)
                pending.append((value_node, child))


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    mapping: dict[Any, Any] = {}
    lines: dict[Any, int] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        mapping[key] = loader.construct_object(value_node, deep=True)
        lines[key] = key_node.start_mark.line + 1
    mapping["__lines__"] = lines
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(text: str, path: str | None) -> Any:
    """A YAML document through the guarded loader; every refusal a ConfigError naming key, file, line."""
    try:
        loader = _LineLoader(text)  # its reader refuses control characters here already
    except yaml.YAMLError as exc:
        raise ConfigError("config", f"invalid YAML: {getattr(exc, 'problem', None) or exc}", path) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, "config")
        return loader.construct_document(node)
    except _Refused as exc:
        raise ConfigError(exc.key, exc.message, path, exc.line) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError("config", f"invalid YAML: {problem}", path, mark.line + 1 if mark else None) from None
    finally:
        loader.dispose()


def read_config_text(path: str, key: str = "config") -> str:
    """A regular file's text, at most MAX_CONFIG_BYTES; a FIFO, device or directory is refused
    without blocking (opened non-blocking, checked before reading)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(key, f"cannot read: {exc.strerror or exc}", path) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(key, "not a regular file", path)
        if info.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(key, f"larger than {MAX_CONFIG_BYTES} bytes", path)
        with os.fdopen(fd, "rb", closefd=False) as stream:
            data = stream.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(key, f"cannot read: {exc.strerror or exc}", path) from None
    finally:
        os.close(fd)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(key, f"larger than {MAX_CONFIG_BYTES} bytes", path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(key, "not UTF-8 text", path) from None


def strip_lines(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_lines(v) for k, v in value.items() if k != "__lines__"}
    if isinstance(value, list):
        return [strip_lines(v) for v in value]
    return value
