"""Safe YAML loading with positions: plain data only, core-schema scalars, duplicates, bombs, bytes."""

from __future__ import annotations

import math
import os
import time

import pytest

from rlflow.schemas.safe_yaml import MAX_NODES, check_aliases, decode_text, parse_yaml, read_config


def load(text: str):
    data, positions, problems = parse_yaml(text, "f.yaml")
    return data, positions, [str(p) for p in problems]


def test_core_schema_scalars():
    data, _, problems = load(
        "on: yes\nno: off\nt: true\nf: False\nn: ~\ne:\ni: 0x1F\no: 0o17\nd: -12\n"
        "lr: 1e-6\nx: 1.5\ninf: -.inf\nday: 2024-01-01\nq: '1'\n"
    )
    assert problems == []
    assert data == {
        "on": "yes",
        "no": "off",
        "t": True,
        "f": False,
        "n": None,
        "e": None,
        "i": 31,
        "o": 15,
        "d": -12,
        "lr": 1e-6,
        "x": 1.5,
        "inf": -math.inf,
        "day": "2024-01-01",
        "q": "1",
    }


def test_positions_of_keys_and_values_are_one_based():
    data, positions, _ = load("a:\n  b: [1, {c: 2}]\n")
    assert positions.keys[("a", "b")] == (2, 3)
    assert positions.values[("a", "b")] == (2, 6)
    assert positions.values[("a", "b", 1, "c")] == (2, 14)
    assert positions.locate(("a", "b", 7, "zz")) == (2, 6)  # nearest ancestor
    assert positions.locate(("a",), "key") == (1, 1)


def test_duplicate_keys_are_errors_and_the_first_value_stays():
    data, _, problems = load("a: 1\nb: {x: 1, x: 2}\na: 3\n")
    assert data == {"a": 1, "b": {"x": 1}}
    assert problems == [
        "f.yaml:2:11: b.x: duplicate key 'x', first set on line 2 (keep one of them; YAML keys must be unique)",
        "f.yaml:3:1: a: duplicate key 'a', first set on line 1 (keep one of them; YAML keys must be unique)",
    ]


def test_merge_keys_and_anchors():
    data, _, problems = load("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  y: 3\nl: [*b]\n")
    assert problems == []
    assert data["d"] == {"y": 3, "x": 1}
    assert data["l"] == [{"x": 1, "y": 2}]


@pytest.mark.parametrize(
    "text, tag",
    [
        ("a: !!python/object/apply:os.system ['echo hi']", "!!python/object/apply:os.system"),
        ("a: !!python/name:os.system", "!!python/name:os.system"),
        ("a: !!binary aGk=", "!!binary"),
        ("a: !!set {x}", "!!set"),
        ("a: !custom 1", "!custom"),
        ("!!python/object:os.Foo {a: 1}", "!!python/object:os.Foo"),
    ],
)
def test_any_non_standard_tag_is_refused(text, tag):
    data, _, problems = load(text)
    assert len(problems) == 1 and f"tag {tag} is not allowed" in problems[0]


def test_nothing_is_constructed_from_a_python_tag(tmp_path):
    marker = tmp_path / "made"
    load(f"a: !!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path ['{marker}']]")
    assert not marker.exists()


def test_alias_bomb_is_refused_quickly():
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
    data, _, problems = load("\n".join(lines))
    assert data is None
    assert problems == [
        f"f.yaml:5:1: a4: document expands to more than {MAX_NODES} nodes (alias bomb?) "
        "(use fewer aliases; a pipeline is small)"
    ]


def test_a_document_large_without_aliases_is_not_called_an_alias_bomb():
    text = "tools:\n" + "".join(f"  - {{name: t{i}, type: native}}\n" for i in range(8000))  # 24,001 nodes
    data, _, problems = parse_yaml(text, "t.yaml", what="a tool config")
    assert data is None
    assert [str(p) for p in problems] == [
        f"t.yaml:1:1: tools: document holds more than {MAX_NODES} values, the most rlflow reads in one file "
        "(a tool config holds a few hundred; move the bulk into a data file)"
    ]
    big = "a: &a [" + ",".join(["x"] * 100) + "]\n" + "".join(f"b{i}: *a\n" for i in range(300))
    assert "alias bomb?" in str(load(big)[2][0])  # 30,000 nodes built from 100 written: the aliases did it
    assert "holds more than 100 values" in check_aliases("x: [" + "1," * 300 + "1]\n", "v.yaml", 100).message


def test_self_referencing_alias_and_deep_nesting_are_refused():
    data, _, problems = load("loop: &s [*s]")
    assert data is None and "nests deeper than 64 levels (is an anchor used inside itself?" in problems[0]
    assert load("a: " + "[" * 100 + "]" * 100)[2] == [
        "f.yaml:1:1: a: document nests deeper than 64 levels (is an anchor used inside itself? pipelines are shallow)"
    ]
    assert load("a: " + "[" * 5000 + "]" * 5000)[2] == [
        "f.yaml:1:204: brackets nest more than 200 deep (pipelines are shallow)"
    ]


@pytest.mark.parametrize(
    "text, where, words",
    [
        ("a:\n\tb: 1\n", "2:1", "YAML does not allow tabs"),
        ("a: [1, 2\n", "2:1", "expected ',' or ']'"),
        ("a: 'open\nb: 1\n", "1:4", "while scanning a quoted scalar"),
        ("a: 1\n---\nb: 2\n", "2:1", "expected a single document"),
        ("? [a]\n: 1\n", "1:3", "mapping keys must be plain text"),
    ],
)
def test_syntax_errors_carry_positions(text, where, words):
    _, _, problems = load(text)
    assert len(problems) == 1 and problems[0].startswith(f"f.yaml:{where}:") and words in problems[0], problems


def test_line_map_translates_positions():
    _, _, problems = parse_yaml("a: 1\nb: [\n", "f.yaml", line_map=lambda line: line + 10)
    assert str(problems[0]).startswith("f.yaml:13:")


def test_empty_document_is_none():
    assert load("")[0::2] == (None, [])
    assert load("# only a comment\n")[0] is None


def test_decode_refuses_binary_and_non_utf8():
    assert decode_text("naïve: 1\n".encode(), "f")[0] == "naïve: 1\n"
    assert decode_text(b"\xef\xbb\xbfa: 1", "f")[0] == "a: 1"  # a BOM is dropped
    _, problems = decode_text(b"a: 1\nb: \x00\x01", "f")
    assert str(problems[0]) == (
        "f:2:4: binary data: control character 0x00 is not allowed (is this a pipeline YAML file?)"
    )
    _, problems = decode_text(b"a: caf\xe9\n", "f")
    assert str(problems[0]).startswith("f:1:7: not UTF-8 text (byte 0xe9 at offset 6)")
    _, problems = decode_text(b"a: \x07bell", "f")
    assert "control character 0x07" in str(problems[0])
    _, problems = decode_text(b"a: 1\n" * 300_000, "f")
    assert str(problems[0]).startswith("f:1:1: the file is 1500000 bytes; config files may hold at most 1048576")


def _alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x,x,x,x,x,x,x,x,x,x]"]
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_check_aliases_counts_the_expansion_without_building_it():
    start = time.monotonic()
    problem = check_aliases(_alias_bomb(10), "bomb.yaml", 100_000)  # 10^10 nodes expanded
    assert time.monotonic() - start < 2
    assert problem is not None and "more than 100000 nodes (alias bomb?)" in problem.message
    assert check_aliases(_alias_bomb(3), "small.yaml", 100_000) is None  # 1,111 nodes: fine
    deep = "a: &a [*a]\n"  # an anchor used inside itself
    assert "nests deeper" in check_aliases(deep, "loop.yaml").message
    assert check_aliases("a: [\n", "broken.yaml") is None  # a syntax error is the next reader's to word


def test_read_config_refuses_special_files_in_one_diagnostic(tmp_path):
    os.mkfifo(tmp_path / "pipe.yaml")
    for path, kind in ((tmp_path / "pipe.yaml", "FIFO"), ("/dev/zero", "character device"), (tmp_path, "folder")):
        text, problems = read_config(path, str(path), "pipeline")
        assert text is None and len(problems) == 1
        assert f"cannot read the pipeline: a {kind}" in problems[0].message
