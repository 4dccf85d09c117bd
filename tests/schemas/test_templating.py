"""Sandboxed templating: values only, every failure a positioned diagnostic, lines mapped back."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

from rlflow.schemas.templating import line_mapper, render, template_variables


def test_substitution_and_filters():
    assert render("a: {{ x }}\nb: {{ x | upper }}\n", {"x": "hi"}, "f") == ("a: hi\nb: HI\n", [])
    assert render("no templates here: {a: 1}\n", {}, "f") == ("no templates here: {a: 1}\n", [])


def test_undefined_variable_is_positioned_with_did_you_mean():
    for source in ("a: 1\nb: {{ bird_rot }}/x\n", "a: 1\nb: {{ bird_rot | upper }}/x\n"):
        text, problems = render(source, {"bird_root": "/d"}, "f")
        assert text is None
        assert str(problems[0]) == (
            "f:2:7: undefined template variable 'bird_rot' (did you mean 'bird_root'?; "
            "define it under vars: in rlflow.yaml or pass --set bird_rot=...)"
        )


@pytest.mark.parametrize(
    "source, words",
    [
        ("a: {{ ''.__class__.__mro__ }}", "access to attribute '__class__'"),
        ("a: {{ cycler.__init__.__globals__.os.system('touch x') }}", "access to attribute '__init__'"),
        ("a: {{ lipsum.__globals__ }}", "__globals__"),
        ("a: {{ 10 ** 100000000 }}", "exponent 100000000 is too large"),
        ("a: {{ 'x' * 100000000 }}", "repetition would build"),
        ("{% for i in range(90000) %}xxxxxxxxxxxxxxxxxxxx{% endfor %}", "renders more than"),
        (
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "loops over range() may run at most 100000 times in all",
        ),
    ],
)
def test_sandbox_refusals_are_diagnostics(source, words, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text, problems = render(source, {}, "f")
    assert text is None and "template refused by the sandbox" in str(problems[0]) and words in str(problems[0])
    assert list(tmp_path.iterdir()) == []


def test_loops_within_budget_render():
    text, _ = render("{% for i in range(3) %}{% for j in range(2) %}{{ i }}{{ j }} {% endfor %}{% endfor %}", {}, "f")
    assert text == "00 01 10 11 20 21 "


def test_syntax_and_runtime_errors_name_the_line():
    assert str(render("a\nb: {% if %}\n", {}, "f")[1][0]).startswith("f:2:1: template syntax error:")
    assert str(render("a\n\nc: {{ 1 // 0 }}\n", {}, "f")[1][0]).startswith("f:3:1: template error: ZeroDivisionError")
    assert "has no attribute 'y'" in str(render("a: {{ x.y }}", {"x": {}}, "f")[1][0])


def test_template_variables():
    assert template_variables("a: {{ x }}/{{ y }}\n") == {"x", "y"}
    assert template_variables("{% for i in xs %}{{ i }}{{ z }}{% endfor %}") == {"xs", "z"}
    assert template_variables("{% if %}") is None


names = st.sampled_from(["x", "y", "model_path", "true", "none", "False", "dict"])
values = st.one_of(st.text(max_size=8), st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
pieces = st.one_of(st.text(alphabet="ab :-{}\n#", max_size=6), names.map(lambda n: "{{ " + n + " }}"))


@settings(max_examples=200, deadline=None)
@given(st.lists(pieces, max_size=8), st.dictionaries(st.sampled_from(["x", "y", "model_path"]), values))
@example(["{", "{{ x }}"], {"x": None})  # "{{{ x }}": Jinja2 lexes "{{" first, so this is a syntax error
def test_plain_substitution_renders_exactly_as_jinja2(parts, variables):
    source = "".join(parts)
    env = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=True)
    try:
        expected = env.from_string(source).render(**variables)
    except Exception:  # noqa: BLE001 - Jinja2 refuses it; so must we
        expected = None
    text, problems = render(source, variables, "f")
    assert text == expected
    assert bool(problems) == (expected is None)


def test_line_mapper():
    same = line_mapper("a\nb\nc\n", "A\nB\nC\n")
    assert [same(i) for i in (1, 2, 3)] == [1, 2, 3]
    source = "a\n{% for i in xs %}\nx{{ i }}\n{% endfor %}\nb\nc\n"
    rendered, _ = render(source, {"xs": [1, 2, 3, 4]}, "f")
    mapped = line_mapper(source, rendered)
    lines = rendered.splitlines()
    assert mapped(1) == 1
    assert mapped(lines.index("b") + 1) == 5 and mapped(lines.index("c") + 1) == 6
    assert all(2 <= mapped(lines.index(f"x{i}") + 1) <= 4 for i in (1, 2, 3, 4))
