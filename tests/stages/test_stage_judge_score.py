"""Stage judge_score: templates in the sandbox, the verdict parsers and corpus, and the stage on a real judge."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from judge_helpers import judge_pipeline, ranking_batch, save_tiny_judge

from rlflow.assets import RANK_JUDGE
from rlflow.batch import Batch
from rlflow.errors import StageError
from rlflow.reward.judge_template import JudgeTemplate, JudgeTemplateError, load_template, row_variables
from rlflow.reward.verdicts import parse_builtin
from rlflow.stages.base import StageContext
from rlflow.stages.judge_score import JudgeScore, JudgeScoreConfig

VERDICTS = Path(__file__).parent / "judge_verdicts"
PARSERS = "judge_verdicts/judge_parsers.py"
HERE = Path(__file__).parent


class FakeJudge:
    """An engine whose judge answers the given verdicts, in order, and records the prompts it got."""

    def __init__(self, verdicts: list[str]) -> None:
        self.verdicts, self.prompts = verdicts, []

    def judge(self, batch: Batch, params: dict) -> Batch:
        self.prompts.extend(batch["judge_prompt"])
        return Batch(non_tensors={"verdict_text": self.verdicts[: len(batch["judge_prompt"])]})


def context(engine, *, root: Path = HERE, **config) -> StageContext:
    pipeline = judge_pipeline("unused", judge={"template": "builtin:ranking_judge", **config})
    return StageContext(
        pipeline=pipeline,
        config=JudgeScoreConfig(**{"template": "builtin:ranking_judge", **config}),
        stage_name="judge",
        step=2,
        engine=engine,
        project_root=str(root),
    )


def close(ctx: StageContext) -> None:
    ctx.at_shutdown.close()


# ---- templates -----------------------------------------------------------------------------------
def test_shipped_template_renders_the_reference_and_answer():
    template = load_template("builtin:ranking_judge", None)
    info = {"ground_truth": "6", "extra_info": {"numbers": [3, 9, 4, 5, 6]}}
    text, why = template.render_row(row_variables("raw", "#### 6", "second_largest", info))
    assert why == ""
    assert text == "Reference: #### 6\nAnswer: #### 6\nSame?\n"


def test_a_project_template_gets_every_variable(tmp_path):
    (tmp_path / "j.jinja").write_text(
        "{{ prompt }}|{{ response }}|{{ data_source }}|{{ ground_truth }}|{{ extra_info.k }}"
    )
    template = load_template("j.jinja", tmp_path)
    text, _ = template.render_row(row_variables("P", "R", "src", {"ground_truth": "G", "extra_info": {"k": 5}}))
    assert text == "P|R|src|G|5"


HOSTILE = [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ response.__init__.__globals__ }}",
    "{{ cycler.__init__.__globals__.os.system('touch {marker}') }}",
    "{% include '/etc/passwd' %}",
    "{% import '/etc/hostname' as h %}{{ h }}",
    "{{ 'x' * 100000000 }}",
    "{% for i in range(10**9) %}{% endfor %}",
]


@pytest.mark.parametrize("source", HOSTILE)
def test_the_sandbox_refuses_a_hostile_template_without_effect(tmp_path, source):
    marker = tmp_path / "pwned"
    template = JudgeTemplate(source.replace("{marker}", str(marker)), "hostile.jinja")
    text, why = template.render_row(row_variables("p", "r", "s", {"ground_truth": "g", "extra_info": {}}))
    assert text is None and why.startswith("hostile.jinja:")
    assert not marker.exists()


def test_a_stage_whose_template_fails_on_every_row_says_where(tmp_path):
    (tmp_path / "bad.jinja").write_text("line one\n{{ ''.__class__ }}\n")
    engine = FakeJudge(["yes"])
    ctx = context(engine, root=tmp_path, template="bad.jinja")
    with pytest.raises(StageError, match=r"bad.jinja:2"):
        JudgeScore().run(ranking_batch(["#### 6"]), ctx)
    assert engine.prompts == []  # nothing reached the judge


def test_a_row_whose_template_fails_scores_zero_and_is_counted(tmp_path):
    (tmp_path / "rows.jinja").write_text("{{ extra_info.numbers[0] }} {{ response }}")
    batch = ranking_batch(["#### 6", "#### 9"])
    batch["reward_info"] = [batch["reward_info"][0], {"ground_truth": "6", "extra_info": {}}]
    out = JudgeScore().run(batch, context(FakeJudge(["yes"]), root=tmp_path, template="rows.jinja"))
    assert out["rm_scores"].sum(-1).tolist() == [1.0, 0.0]
    assert out.metrics["reward_model/template_error_ratio"] == 0.5
    assert out.metrics["reward_model/parse_error_ratio"] == 0.0


# ---- check_in_project ----------------------------------------------------------------------------
def _problems(tmp_path, **config):
    pipeline = judge_pipeline("unused", judge=config)
    return JudgeScore.check_in_project(pipeline, pipeline.stage("judge"), tmp_path)


def test_check_in_project_accepts_the_shipped_template_and_a_parse_function():
    pipeline = judge_pipeline("unused", judge={"template": "builtin:ranking_judge", "parse": f"{PARSERS}:first_digit"})
    assert JudgeScore.check_in_project(pipeline, pipeline.stage("judge"), HERE) == []


def test_check_in_project_names_a_missing_template(tmp_path):
    [(path, message, _)] = _problems(tmp_path, template="nowhere.jinja")
    assert path == "with.template" and "nowhere.jinja" in message


def test_check_in_project_gives_file_and_line_of_a_syntax_error(tmp_path):
    (tmp_path / "s.jinja").write_text("ok\n{{ response }\n")
    [(path, message, _)] = _problems(tmp_path, template="s.jinja")
    assert path == "with.template" and "s.jinja:2" in message and "syntax" in message


def test_check_in_project_names_a_variable_no_row_gives(tmp_path):
    (tmp_path / "v.jinja").write_text("{{ response }}\n{{ secret }}\n")
    [(_, message, fix)] = _problems(tmp_path, template="v.jinja")
    assert "v.jinja:2" in message and "'secret'" in message and "response" in fix


def test_check_in_project_names_a_parse_function_that_does_not_load(tmp_path):
    [(path, message, fix)] = _problems(tmp_path, template="builtin:ranking_judge", parse="nope.py:fn")
    assert path == "with.parse" and "nope.py" in message and "yes_no" in fix


def test_an_unknown_builtin_template_is_a_problem(tmp_path):
    with pytest.raises(JudgeTemplateError, match="unknown built-in"):
        load_template("builtin:no_such_judge", tmp_path)


# ---- the verdict corpus --------------------------------------------------------------------------
def corpus() -> list[tuple[str, str, float | None, str]]:
    """(file, parse, expected score or None, verdict) of each file in judge_verdicts/."""
    cases = []
    for path in sorted(VERDICTS.glob("*.txt")):
        header, _, body = path.read_text(encoding="utf-8").partition("\n")
        fields = dict(part.strip().split(": ", 1) for part in header.lstrip("# ").split("|"))
        expect = None if fields["expect"] == "none" else float(fields["expect"])
        cases.append((path.name, fields["parse"], expect, body * int(fields.get("repeat", 1))))
    return cases


@pytest.mark.parametrize(("name", "parse", "expect", "verdict"), corpus(), ids=[c[0] for c in corpus()])
def test_the_corpus_through_the_parser(name, parse, expect, verdict):
    [score] = parse_builtin(parse, [verdict])
    assert (score is None) if expect is None else math.isclose(score, expect)


@pytest.mark.parametrize("parse", ["yes_no", "score"])
def test_the_corpus_through_the_stage_scores_malformed_verdicts_zero_and_counts_them(parse):
    cases = [c for c in corpus() if c[1] == parse]
    verdicts = [c[3] for c in cases]
    out = JudgeScore().run(ranking_batch(["#### 6"] * len(cases)), context(FakeJudge(verdicts), parse=parse))
    expected = [0.0 if c[2] is None else c[2] for c in cases]
    np.testing.assert_allclose(out["rm_scores"].sum(-1), expected, rtol=1e-6)
    bad = sum(c[2] is None for c in cases) / len(cases)
    assert out.metrics["reward_model/parse_error_ratio"] == pytest.approx(bad)
    assert out.metrics["reward_model/score/mean"] == pytest.approx(np.mean(expected))


@pytest.mark.parametrize(
    ("function", "scores", "errors"),
    [
        ("first_digit", [0.7, 0.0], 0.5),  # the second verdict has no digit: None, an error
        ("raises", [0.0, 0.0], 1.0),
        ("returns_none", [0.0, 0.0], 1.0),
        ("exits", [0.0, 0.0], 1.0),
        ("hangs", [0.0, 0.0], 1.0),
    ],
)
def test_a_parse_function_that_fails_scores_zero_and_is_counted(function, scores, errors):
    ctx = context(FakeJudge(["Score 7", "none at all"]), parse=f"{PARSERS}:{function}", timeout_s=0.5)
    try:
        out = JudgeScore().run(ranking_batch(["#### 6", "#### 9"]), ctx)
    finally:
        close(ctx)
    np.testing.assert_allclose(out["rm_scores"].sum(-1), scores, rtol=1e-6)
    assert out.metrics["reward_model/parse_error_ratio"] == errors


def test_the_judge_gets_the_rendered_template_as_one_user_message():
    engine = FakeJudge(["yes", "no"])
    out = JudgeScore().run(ranking_batch(["#### 6", "#### 9"]), context(engine))
    assert engine.prompts[1] == [
        {
            "role": "user",
            "content": "Reference: #### 6\nAnswer: #### 9\nSame?\n",
        }
    ]
    assert out["rm_scores"].sum(-1).tolist() == [1.0, 0.0]
    assert out["scores"].tolist() == [1.0, 0.0]  # the only reward stage: it writes the step's scores


# ---- on a real LocalEngine holding a judge -------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_judge(tmp_path_factory):
    return save_tiny_judge(tmp_path_factory.mktemp("judge") / "tiny-judge")


def _engine(pipeline):
    from rlflow.backends.local.local_engine import LocalEngine

    return LocalEngine(pipeline, roles=frozenset({"judge"}))


def _run(pipeline, engine, batch) -> Batch:
    spec = pipeline.stage("judge")
    ctx = StageContext(
        pipeline=pipeline,
        config=JudgeScore.parse_config(spec.with_),
        stage_name="judge",
        step=1,
        engine=engine,
        reads=JudgeScore.reads(pipeline, spec),
    )
    return JudgeScore().run(batch, ctx)


def test_the_stage_on_a_local_engine_with_a_random_judge_never_crashes(tiny_judge):
    pipeline = judge_pipeline(str(tiny_judge))
    engine = _engine(pipeline)
    batch = ranking_batch(["#### 6", "#### 9", "", "garbage " * 40])
    first = _run(pipeline, engine, batch)
    again = _run(pipeline, engine, batch)
    assert np.array_equal(first["rm_scores"], again["rm_scores"])  # greedy: the same verdicts
    assert first["rm_scores"].shape == (4, 4)
    assert 0.0 <= first.metrics["reward_model/parse_error_ratio"] <= 1.0
    assert engine.model is None and engine.judge_model is not None  # the judge only: no policy on this worker


@pytest.mark.skipif(not (RANK_JUDGE / "config.json").exists(), reason="the shipped judge is not built")
def test_the_shipped_judge_accepts_the_right_answer_and_rejects_wrong_and_malformed_ones():
    # its agreement by kind of answer is its record's (judge_model.json); here: fixed rows, verdicts parse
    pipeline = judge_pipeline("builtin:tiny-rank-judge", rollout={"response_length": 3})
    out = _run(pipeline, _engine(pipeline), ranking_batch(["#### 6", "#### 3", "6", "#### 6 9"]))
    assert out["rm_scores"].sum(-1).tolist() == [1.0, 0.0, 0.0, 0.0]
    assert out.metrics["reward_model/parse_error_ratio"] == 0.0
