"""Safe YAML loading that remembers where every key and value was written.

Plain data only, aliases and depth under a cap, duplicate keys refused. Design notes: docs/design/safe_yaml.md.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import yaml
from yaml.composer import Composer
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import BaseResolver
from yaml.scanner import Scanner

from rlflow.io import read_bytes
from rlflow.schemas.diagnostics import Diagnostic, format_path

MAX_BYTES = 1 << 20  # a large pipeline is a few KiB
MAX_NODES = 20_000  # a large pipeline has a few hundred; an alias bomb has billions
MAX_DEPTH = 64
MAX_BRACKETS = 200  # PyYAML's scanner is quadratic in flow nesting: refuse deep [[[[ before it starts
_BRACKET = re.compile(r"[\[\]{}]")
_STD = "tag:yaml.org,2002:"
_NON_PRINTABLE = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class CoreResolver(BaseResolver):
    """YAML 1.2 core schema for plain scalars (no yes/no/on/off booleans, no timestamps)."""


for _tag, _regex, _first in (
    ("bool", r"^(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    ("int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
    ("merge", r"^(?:<<)$", "<"),
):
    CoreResolver.add_implicit_resolver(_STD + _tag, re.compile(_regex), list(_first))


class _Composer(Reader, Scanner, Parser, Composer, CoreResolver):
    """PyYAML's pure-Python composer with the core-schema resolver; builds nodes, never objects."""

    def __init__(self, text: str) -> None:
        Reader.__init__(self, text)
        Scanner.__init__(self)
        Parser.__init__(self)
        Composer.__init__(self)
        CoreResolver.__init__(self)


class Positions:
    """Where each value (and each mapping key) of a document was written: path -> (line, col)."""

    def __init__(self) -> None:
        self.values: dict[tuple, tuple[int, int]] = {}
        self.keys: dict[tuple, tuple[int, int]] = {}

    def locate(self, path: tuple, at: str = "value") -> tuple[int, int]:
        """Position of ``path`` (its key when ``at == "key"``), else of its nearest ancestor."""
        path = tuple(path)
        while path:
            if at == "key" and path in self.keys:
                return self.keys[path]
            if path in self.values:
                return self.values[path]
            path = path[:-1]
        return self.values.get((), (1, 1))


class _Refused(Exception):
    """Construction must stop (alias bomb, runaway depth)."""

    def __init__(self, node: Node, path: tuple, message: str, fix: str) -> None:
        super().__init__(message)
        self.node, self.path, self.message, self.fix = node, path, message, fix


def read_config(path: str | os.PathLike, file: str, what: str = "config file") -> tuple[str | None, list[Diagnostic]]:
    """The text of config file ``path`` (``file`` names it in messages): read bounded, then ``decode_text``."""
    try:
        raw = read_bytes(path, MAX_BYTES, what)
    except OSError as exc:
        return None, [Diagnostic(file, 1, 1, "", f"cannot read the {what}: {exc.strerror or exc}")]
    return decode_text(raw, file)


def check_aliases(text: str, file: str, max_nodes: int = MAX_NODES) -> Diagnostic | None:
    """A problem when ``text`` expands (aliases followed) to more than ``max_nodes`` nodes or nests past
    MAX_DEPTH; None otherwise, and for a syntax error (the reader that follows words that one)."""
    if _too_many_brackets(text) is not None:
        return Diagnostic(file, 1, 1, "", f"brackets nest more than {MAX_BRACKETS} deep", "configs are shallow")
    try:
        root = _Composer(text).get_single_node()
    except (yaml.YAMLError, RecursionError):
        return None
    sizes: dict[int, int] = {}  # node id -> expanded size: an alias is a shared node, counted once here
    stack: list[tuple[Node, int, bool]] = [(root, 0, False)] if root is not None else []
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            return Diagnostic(
                file, node.start_mark.line + 1, 1, "", f"the document nests deeper than {MAX_DEPTH} levels"
            )
        children = _children(node)
        if done:
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(node)] > max_nodes:
                message, fix = too_many_nodes(max_nodes, sizes[id(node)], len(sizes), "a config")
                return Diagnostic(file, 1, 1, "", f"the {message}", fix)
        elif id(node) not in sizes:
            stack.append((node, depth, True))
            stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)
    return None


def too_many_nodes(cap: int, built: int, written: int, what: str) -> tuple[str, str]:
    """(problem, fix) for a document past ``cap`` nodes, ``built`` of them with aliases followed, ``written`` in
    its text: an alias bomb when aliases made most of them, else a document that is simply that large."""
    if built - written > written:
        return f"document expands to more than {cap} nodes (alias bomb?)", f"use fewer aliases; {what} is small"
    return (
        f"document holds more than {cap} values, the most rlflow reads in one file",
        f"{what} holds a few hundred; move the bulk into a data file",
    )


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [n for pair in node.value for n in pair]
    return list(node.value) if isinstance(node, SequenceNode) else []


def decode_text(raw: bytes, file: str) -> tuple[str | None, list[Diagnostic]]:
    """Bytes -> text, refusing non-UTF-8 and binary data with the position of the first bad byte."""
    if len(raw) > MAX_BYTES:
        return None, [
            Diagnostic(
                file,
                1,
                1,
                "",
                f"the file is {len(raw)} bytes; config files may hold at most {MAX_BYTES}",
                "is this a pipeline YAML file?",
            )
        ]
    if b"\x00" in raw:  # UTF-8 text never holds NUL; binary files nearly always do
        line, col = _offset_position(raw, raw.index(b"\x00"))
        return None, [
            Diagnostic(
                file,
                line,
                col,
                "",
                "binary data: control character 0x00 is not allowed",
                "is this a pipeline YAML file?",
            )
        ]
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, col = _offset_position(raw, exc.start)
        return None, [
            Diagnostic(
                file,
                line,
                col,
                "",
                f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
                "pipeline files must be UTF-8 text",
            )
        ]
    bad = _NON_PRINTABLE.search(text)
    if bad:
        line, col = _offset_position(text, bad.start())
        return None, [
            Diagnostic(
                file,
                line,
                col,
                "",
                f"binary data: control character 0x{ord(bad.group()):02x} is not allowed",
                "is this a pipeline YAML file?",
            )
        ]
    return text, []


def _too_many_brackets(text: str) -> int | None:
    """Offset where ``[``/``{`` nesting passes MAX_BRACKETS (brackets inside strings count too: an
    over-estimate that only matters for absurd files)."""
    depth = 0
    for match in _BRACKET.finditer(text):
        depth = depth + 1 if match.group() in "[{" else max(depth - 1, 0)
        if depth > MAX_BRACKETS:
            return match.start()
    return None


def _offset_position(data: bytes | str, offset: int) -> tuple[int, int]:
    newline = b"\n" if isinstance(data, bytes) else "\n"
    head = data[:offset]
    return head.count(newline) + 1, offset - (head.rfind(newline) + 1) + 1


def parse_yaml(
    text: str, file: str, line_map: Callable[[int], int] = lambda line: line, what: str = "a pipeline"
) -> tuple[Any, Positions, list[Diagnostic]]:
    """Parse one YAML document. Returns (data or None, positions, diagnostics); ``what`` the document is
    (``a tool config``) words the fix of one past the node cap."""
    builder = _Builder(file, line_map, what)
    deep = _too_many_brackets(text)
    if deep is not None:
        line, col = _offset_position(text, deep)
        return (
            None,
            builder.positions,
            [
                Diagnostic(
                    file,
                    line_map(line),
                    col,
                    "",
                    f"brackets nest more than {MAX_BRACKETS} deep",
                    "pipelines are shallow",
                )
            ],
        )
    try:
        node = _Composer(text).get_single_node()
    except yaml.MarkedYAMLError as exc:
        return None, builder.positions, [builder.syntax_error(exc)]
    except yaml.YAMLError as exc:  # reader errors carry no mark in every PyYAML version
        return None, builder.positions, [Diagnostic(file, 1, 1, "", f"YAML error: {exc}")]
    except RecursionError:  # the composer recurses once per nesting level
        return (
            None,
            builder.positions,
            [Diagnostic(file, 1, 1, "", "document nests too deeply", f"at most {MAX_DEPTH} levels")],
        )
    if node is None:
        return None, builder.positions, []
    try:
        data = builder.build(node, ())
    except _Refused as exc:  # reported at the top-level key whose value blew up: that is what to fix
        top = exc.path[:1]
        line, col = builder.positions.keys.get(top) or builder.where(exc.node)
        builder.diagnostics.append(Diagnostic(file, line, col, format_path(top), exc.message, exc.fix))
        data = None
    return data, builder.positions, builder.diagnostics


class _Builder:
    """Builds plain Python data from nodes, recording positions and collecting problems."""

    def __init__(self, file: str, line_map: Callable[[int], int], what: str) -> None:
        self.file, self.line_map, self.what = file, line_map, what
        self.positions = Positions()
        self.diagnostics: list[Diagnostic] = []
        self.count = 0  # nodes built, each alias's expansion included
        self.written: set[int] = set()  # the nodes of the text itself: an alias builds its anchor's again

    def where(self, node: Node) -> tuple[int, int]:
        mark = node.start_mark
        return self.line_map(mark.line + 1), mark.column + 1

    def error(self, node: Node, path: tuple, message: str, fix: str = "") -> None:
        line, col = self.where(node)
        self.diagnostics.append(Diagnostic(self.file, line, col, format_path(path), message, fix))

    def syntax_error(self, exc: yaml.MarkedYAMLError) -> Diagnostic:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or "invalid YAML"
        if "end of stream" in problem and exc.context_mark:  # e.g. a quote never closed: show where it opened
            mark = exc.context_mark
        line, col = (self.line_map(mark.line + 1), mark.column + 1) if mark else (1, 1)
        fix = "indent with spaces; YAML does not allow tabs" if "\\t" in problem else ""
        if exc.context and exc.context_mark:
            context = f"{exc.context} from line {self.line_map(exc.context_mark.line + 1)}"
            problem = f"{context}, {problem}" if problem.startswith("but ") else f"{problem}; {context}"
        return Diagnostic(self.file, line, col, "", f"YAML syntax error: {problem}", fix)

    def build(self, node: Node, path: tuple) -> Any:
        self.count += 1
        self.written.add(id(node))
        if self.count > MAX_NODES:
            raise _Refused(node, path, *too_many_nodes(MAX_NODES, self.count, len(self.written), self.what))
        if len(path) > MAX_DEPTH:
            raise _Refused(
                node,
                path,
                f"document nests deeper than {MAX_DEPTH} levels",
                "is an anchor used inside itself? pipelines are shallow",
            )
        self.positions.values[path] = self.where(node)
        if isinstance(node, MappingNode):
            return self._mapping(node, path) if self._tag_ok(node, path, "map") else None
        if isinstance(node, SequenceNode):
            if not self._tag_ok(node, path, "seq"):
                return None
            return [self.build(child, path + (i,)) for i, child in enumerate(node.value)]
        return self._scalar(node, path)

    def _tag_ok(self, node: Node, path: tuple, expected: str) -> bool:
        if node.tag == _STD + expected:
            return True
        tag = node.tag.replace(_STD, "!!")
        self.error(node, path, f"tag {tag} is not allowed", "pipeline files hold plain data; remove the tag")
        return False

    def _scalar(self, node: ScalarNode, path: tuple) -> Any:
        kind = node.tag[len(_STD) :] if node.tag.startswith(_STD) else None
        value = node.value
        try:
            if kind == "str":
                return value
            if kind == "null":
                return None
            if kind == "bool":
                return value.lower() == "true"
            if kind == "int":
                return int(value, 0) if value[:2] in ("0x", "0o") else int(value, 10)
            if kind == "float":
                return float(value.lower().replace(".inf", "inf").replace(".nan", "nan"))
        except ValueError:
            self.error(node, path, f"cannot read {value!r} as {kind}", "remove the tag or fix the value")
            return None
        self._tag_ok(node, path, "str")
        return None

    def _mapping(self, node: MappingNode, path: tuple) -> dict:
        result: dict = {}
        seen: dict[str, Node] = {}
        merged: list[tuple[str, Node, Node, tuple]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _STD + "merge":
                merged.extend(self._merge_sources(value_node, path))
                continue
            key = self._key(key_node, path)
            if key is None:
                continue
            if key in seen:
                first_line = self.where(seen[key])[0]
                self.error(
                    key_node,
                    path + (key,),
                    f"duplicate key {key!r}, first set on line {first_line}",
                    "keep one of them; YAML keys must be unique",
                )
                continue
            seen[key] = key_node
            self.positions.keys[path + (key,)] = self.where(key_node)
            result[key] = self.build(value_node, path + (key,))
        for key, key_node, value_node, _ in merged:
            if key not in result:
                self.positions.keys[path + (key,)] = self.where(key_node)
                result[key] = self.build(value_node, path + (key,))
        return result

    def _merge_sources(self, value_node: Node, path: tuple) -> list:
        sources = value_node.value if isinstance(value_node, SequenceNode) else [value_node]
        pairs = []
        for source in sources:
            if not isinstance(source, MappingNode):
                self.error(source, path, "a merge key (<<) takes a mapping or a list of mappings")
                continue
            for key_node, value_node_ in source.value:
                key = self._key(key_node, path)
                if key is not None and all(key != p[0] for p in pairs):
                    pairs.append((key, key_node, value_node_, path))
        return pairs

    def _key(self, key_node: Node, path: tuple) -> str | None:
        if not isinstance(key_node, ScalarNode):
            self.error(key_node, path, "mapping keys must be plain text", "use a simple `name:` key")
            return None
        if not key_node.tag.startswith(_STD):
            self._tag_ok(key_node, path, "str")
            return None
        return key_node.value
