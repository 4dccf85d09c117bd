"""reward_function at validate time: each reference loads from the project root, or a diagnostic at its line."""

from __future__ import annotations

import pytest
from schema_helpers import MINIMAL, load_text, problems_of

REWARD = "  - {name: reward, uses: text2sql_reward, on: rw}\n"
GOOD = "def score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1.0\n"


def pipeline(with_block: str) -> str:
    """MINIMAL with its reward stage (line 10) a reward_function whose ``with:`` starts at line 11."""
    assert REWARD in MINIMAL
    return MINIMAL.replace(REWARD, f"  - name: reward\n    uses: reward_function\n    on: rw\n    with:\n{with_block}")


@pytest.fixture
def rewards(project_dir):
    (project_dir / "rewards").mkdir()
    (project_dir / "rewards" / "r.py").write_text(
        GOOD + "WEIGHT = 2\ndef two(a, b):\n    return 0.0\nraise_at_import = False\n", encoding="utf-8"
    )
    (project_dir / "rewards" / "broken.py").write_text("import no_such_package_for_rlflow\n", encoding="utf-8")
    return project_dir


def test_module_and_file_references_validate(rewards):
    text = pipeline(
        "      functions:\n"
        "        - {function: 'rlflow.reward.math_answer:compute_score', weight: 1.0}\n"
        "        - {function: 'rewards/r.py:score', weight: 0.5, name: fmt}\n"
        f"        - {{function: '{rewards / 'rewards' / 'r.py'}:score', name: again}}\n"
    )
    assert load_text(rewards, text).spec.stage("reward").uses == "reward_function"


@pytest.mark.parametrize(
    "function, expected",
    [
        (
            "no_such_module_for_rlflow:score",
            "14:17: stages[1].with.function: cannot import module 'no_such_module_for_rlflow': ModuleNotFoundError: "
            "No module named 'no_such_module_for_rlflow' (check the module name and that it is installed or on the "
            "Python path, or give a file path instead: `path/to/file.py:function`)",
        ),
        ("rewards/missing.py:score", "14:17: stages[1].with.function: reward function file "),
        (
            "rewards/broken.py:score",
            "14:17: stages[1].with.function: loading ",
        ),
        ("rewards/r.py:scor", "has no attribute 'scor' (callables there: score, two)"),
        ("rewards/r.py:WEIGHT", "'rewards/r.py:WEIGHT' is a int, not a callable (name a function defined there)"),
        ("rewards/r.py:two", "'rewards/r.py:two' cannot be called as fn(data_source=..., solution_str=..., "),
        ("rewards.r.score", "reward function reference 'rewards.r.score' has no ':' before the callable's name"),
    ],
)
def test_a_reference_that_does_not_load_is_an_error_at_its_line(rewards, function, expected):
    problems = problems_of(rewards, pipeline(f"      function: '{function}'\n"))
    assert len(problems) == 1 and expected in problems[0], problems
    assert problems[0].startswith("14:17: stages[1].with.function: ")


def test_the_broken_import_and_the_signature_are_named(rewards):
    (broken,) = problems_of(rewards, pipeline("      function: rewards/broken.py:score\n"))
    assert "ModuleNotFoundError: No module named 'no_such_package_for_rlflow' (fix the error in that file)" in broken
    (two,) = problems_of(rewards, pipeline("      function: rewards/r.py:two\n"))
    assert "missing a required argument: 'a'" in two and "its signature is two(a, b)" in two
    assert two.endswith("(define it as def two(data_source, solution_str, ground_truth, extra_info=None))")


def test_weights_are_finite_numbers(rewards):
    text = pipeline(
        "      functions:\n"
        "        - {function: 'rewards/r.py:score'}\n"
        "        - {function: 'rewards/r.py:score', weight: .nan, name: c}\n"
    )
    assert problems_of(rewards, text) == [
        "16:52: stages[1].with.functions[1].weight: should be a finite number; got nan"
    ]


def test_a_list_with_a_bad_reference_is_positioned_at_it(rewards):
    text = pipeline(
        "      functions:\n        - {function: 'rewards/r.py:score'}\n        - {function: 'rewards/r.py:nope', name: b}\n"
    )
    (problem,) = problems_of(rewards, text)
    assert problem.startswith("16:22: stages[1].with.functions[1].function: ") and "no attribute 'nope'" in problem


@pytest.mark.parametrize(
    "with_block, expected",
    [
        ("      timeout_s: 5\n", "give exactly one of `function` (one reward function) or `functions`"),
        (
            "      functions: [{function: 'rewards/r.py:score'}, {function: 'rlflow.reward.math_answer:score'}]\n",
            "functions[0] and functions[1] are both named 'score'; give each its own `name:`",
        ),
        ("      function: 'rewards/r.py:score'\n      timeout_s: 0\n", "timeout_s"),
    ],
)
def test_the_config_itself_is_checked(rewards, with_block, expected):
    problems = problems_of(rewards, pipeline(with_block))
    assert any(expected in p for p in problems), problems
