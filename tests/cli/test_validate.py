"""``rlflow validate`` and ``rlflow schema`` as users run them: output, exit codes, JSON, import weight."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "check"))  # verl_copy: an editable copy of verl's trainer

from verl_copy import VerlCopy  # noqa: E402

BIRD = "pipelines/bird_grpo.yaml"
HEAVY = ("torch", "ray", "verl", "transformers", "vllm", "deepspeed")


def line_of(path: Path, needle: str) -> int:
    """1-based line of the first line holding ``needle`` (the shipped file may gain comments)."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if needle in line)


def rlflow(*args: str, cwd: Path = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rlflow.cli.main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_valid_pipeline_prints_ok_and_exits_0():
    result = rlflow("validate", BIRD)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{BIRD}: ok (7 stages, 2 resources)\n"
    assert result.stderr == ""


def test_every_error_of_every_file_exit_2_no_traceback(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("vars: {model_path: m, bird_root: /b}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        (REPO / BIRD).read_text().replace("on: reward_pool", "on: reward_pol").replace("total_steps:", "total_step:")
    )
    worse = tmp_path / "worse.yaml"
    worse.write_text("name: [\n")
    result = rlflow("validate", "--no-check-paths", str(REPO / BIRD), str(bad), str(worse), cwd=tmp_path)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stdout == f"{REPO / BIRD}: ok (7 stages, 2 resources)\n"
    lines = result.stderr.splitlines()
    trainer, reward = line_of(bad, "total_step:"), line_of(bad, "reward_pol}")
    assert lines[0].startswith(f"{bad}:{trainer}:") and "trainer.total_step: unknown key 'total_step'" in lines[0]
    assert lines[1] == f"{bad}:{reward}:53: stages[1].on: unknown resource 'reward_pol' (did you mean 'reward_pool'?)"
    assert lines[2].startswith(f"{worse}:2:1: YAML syntax error")
    assert lines[-1] == "3 problems in 2 files"


def test_set_options_reach_the_pipeline():
    result = rlflow("validate", BIRD, "--set", "trainer.ppo_mini_batch_size=20", "-s", "bird_root=/elsewhere")
    assert result.returncode == 2
    expected = (
        "trainer.ppo_mini_batch_size: --set trainer.ppo_mini_batch_size=20: train_batch_size 16 is smaller than "
        "ppo_mini_batch_size 20"
    )
    assert expected in result.stderr


def test_json_output():
    result = rlflow("validate", BIRD, "--json", "--set", "stages.1.on=reward_pol")
    assert result.returncode == 2
    report = json.loads(result.stdout)
    assert report["ok"] is False
    (entry,) = report["files"]
    assert entry["file"] == BIRD and entry["ok"] is False
    line = line_of(REPO / BIRD, "uses: text2sql_reward")
    assert entry["diagnostics"] == [
        {
            "file": BIRD,
            "line": line,
            "col": 53,
            "path": "stages[1].on",
            "message": "--set stages.1.on=reward_pol: unknown resource 'reward_pol'",
            "fix": "did you mean 'reward_pool'?",
        }
    ]
    ok = json.loads(rlflow("validate", BIRD, "--json").stdout)
    assert ok == {
        "ok": True,
        "files": [{"file": BIRD, "ok": True, "stages": 7, "resources": 2, "diagnostics": [], "warnings": []}],
    }


def test_a_warning_prints_and_leaves_the_file_valid():
    clip = "algorithm.clip_ratio=0.3"
    result = rlflow("validate", BIRD, "--set", clip)
    assert result.returncode == 0 and result.stdout == f"{BIRD}: ok (7 stages, 2 resources)\n"
    line = line_of(REPO / BIRD, "algorithm:")
    assert result.stderr.startswith(f"{BIRD}:{line}:12: warning: algorithm.clip_ratio: --set {clip}: clip_ratio 0.3 ")
    assert result.stderr.rstrip().endswith("(set clip_ratio_low: 0.3 and clip_ratio_high: 0.3 instead)")
    (entry,) = json.loads(rlflow("validate", BIRD, "--json", "--set", clip).stdout)["files"]
    assert entry["ok"] is True and [w["path"] for w in entry["warnings"]] == ["algorithm.clip_ratio"]


def test_the_count_is_of_the_stages_the_step_runs():
    bypass = "algorithm.rollout_correction.bypass_mode=true"  # the rollout's log-probs: old_log_prob does not run
    result = rlflow("validate", BIRD, "--set", bypass)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout
        == f"{BIRD}: ok (6 stages, 2 resources; declared but not run under these settings: old_log_prob)\n"
    )
    (entry,) = json.loads(rlflow("validate", BIRD, "--json", "--set", bypass).stdout)["files"]
    assert (entry["stages"], entry["not_run"]) == (6, ["old_log_prob"])


def test_print_shows_the_pipeline_as_it_would_run(tmp_path):
    from rlflow.check import load_pipeline

    sets = ["-s", "algorithm.use_kl_loss=false", "-s", "stages.generate.with.temperature=0.7"]
    result = rlflow("validate", "--print", BIRD, "--drop", "ref_log_prob", *sets)
    assert result.returncode == 0, result.stderr
    assert result.stderr == f"{BIRD}: ok (6 stages, 2 resources)\n", "stdout holds the YAML alone"
    expected = load_pipeline(REPO / BIRD, sets[1::2], drops=["ref_log_prob"]).resolved_yaml()
    assert result.stdout == expected
    resolved = yaml.safe_load(result.stdout)
    assert resolved["stages"][0]["with"] == {"temperature": 0.7} and resolved["trainer"]["total_epochs"] is not None

    (tmp_path / "derived.yaml").write_text(f"base: {REPO / BIRD}\nname: derived\n")
    both = rlflow("validate", "--print", BIRD, str(tmp_path / "derived.yaml"))
    first, second = yaml.safe_load_all(both.stdout)
    assert (first["name"], second["name"]) == ("bird-grpo", "derived") and "base" not in second
    assert both.stdout.startswith(f"--- # {BIRD}\n")


def test_dropping_the_reference_stage_says_how_to_turn_kl_off():
    result = rlflow("validate", BIRD, "--drop", "ref_log_prob")
    assert result.returncode == 2
    kl = next(line for line in result.stderr.splitlines() if "algorithm.use_kl_loss:" in line)
    assert "no stage computes reference log-probs" in kl and kl.endswith("--set algorithm.use_kl_loss=false)")
    typo = rlflow("validate", BIRD, "--drop", "ref_logprob")
    assert "--drop ref_logprob: no stage named 'ref_logprob' (did you mean 'ref_log_prob'?)" in typo.stderr


def test_missing_data_and_model_are_reported_unless_paths_are_not_checked(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("vars: {model_path: models/policy, bird_root: bird}\n")
    result = rlflow("validate", str(REPO / BIRD), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    model, train = line_of(REPO / BIRD, "model: {path:"), line_of(REPO / BIRD, "train:")
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"{REPO / BIRD}:{model}:15: model.path: no folder at {tmp_path}/models/policy")
    assert lines[1].startswith(f"{REPO / BIRD}:{train}:10: data.train: no file at {tmp_path}/bird/train.json")
    assert "--no-check-paths" in lines[1] and lines[-1] == "4 problems in 1 file"
    for flag in ("--no-check-paths", "--no-check-paths --json"):
        skipped = rlflow("validate", *flag.split(), str(REPO / BIRD), cwd=tmp_path)
        assert skipped.returncode == 0, skipped.stderr


def test_broken_project_config_is_reported(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("vars: {}\nray: {adress: auto}\n")
    result = rlflow("validate", str(REPO / BIRD), cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.startswith("rlflow.yaml:2:7: ray.adress: unknown key 'adress' (did you mean 'address'?)")


def test_verl_flag_finds_the_shipped_pipeline_in_verl_order():
    result = rlflow("validate", "--verl", BIRD)
    assert result.returncode == 0 and result.stderr == ""
    ok, order = result.stdout.splitlines()
    assert ok == f"{BIRD}: ok (7 stages, 2 resources)"
    assert order.startswith(f"{BIRD}: verl order: the plan runs as PPOTrainerSync in verl ") and order.endswith(" does")


def test_verl_flag_finds_ppo_with_its_critic_in_verl_order():
    ppo = "pipelines/ranking_ppo.yaml"
    result = rlflow("validate", "--verl", ppo)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.splitlines() == [
        f"{ppo}: ok (9 stages, 3 resources)",
        f"{ppo}: verl order: the plan runs as PPOTrainerSync in verl {version('verl')} does",
    ]


def test_verl_flag_warns_about_a_changed_verl_and_exits_0(tmp_path):
    changed = VerlCopy(tmp_path / "verl_src").unwrap_if("trainer_base.py", "self.use_reference_policy")
    result = rlflow("validate", "--verl", BIRD, env={"RLFLOW_VERL_SOURCE": str(changed.root)})
    assert result.returncode == 0
    assert result.stdout == f"{BIRD}: ok (7 stages, 2 resources)\n"
    [warning] = result.stderr.splitlines()
    assert warning.startswith(f"{BIRD}: warning: verl order: verl `ref` (trainer_base.py:")
    assert "'ref_log_prob' (ref_log_prob): verl no longer runs it under `if self.use_reference_policy`" in warning
    report = json.loads(
        rlflow("validate", "--verl", "--json", BIRD, env={"RLFLOW_VERL_SOURCE": str(changed.root)}).stdout
    )
    assert report["ok"] is True and report["files"][0]["verl_order"]["differences"] == [
        warning.split("verl order: ", 1)[1]
    ]


def test_verl_flag_without_verl_says_so_and_exits_0():
    code = (  # the light install: nothing finds a verl package
        "import importlib.util, sys\n"
        "real = importlib.util.find_spec\n"
        "importlib.util.find_spec = lambda name, *a: None if name == 'verl' else real(name, *a)\n"
        "sys.argv = ['rlflow', 'validate', '--verl', 'pipelines/bird_grpo.yaml']\n"
        "from rlflow.cli.main import main\nmain()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert result.stderr == (
        f"{BIRD}: warning: verl order: verl is not installed, check skipped (pip install 'rlflow[train]' to run it)\n"
    )


RUNNER = """
import sys
sys.argv = ["rlflow", "validate", *{args!r}]
from rlflow.cli.main import main
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
print(code, " ".join(heavy) or "-", file=sys.stderr)
"""


@pytest.mark.parametrize(
    "args", [[BIRD], ["--verl", BIRD], [BIRD, "--print", "--drop", "ref_log_prob", "-s", "algorithm.use_kl_loss=false"]]
)
def test_validate_imports_no_heavy_module(args):
    code = RUNNER.replace("{heavy!r}", repr(set(HEAVY))).replace("{args!r}", repr(args))
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stderr.strip().splitlines()[-1] == "0 -", result.stderr


def test_importtime_shows_no_heavy_module():
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "rlflow.cli.main", "validate", BIRD],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0
    imported = {line.split("|")[-1].strip().split(".")[0] for line in result.stderr.splitlines() if "|" in line}
    assert "pydantic" in imported and not imported & set(HEAVY)


MODULES = """
import json, sys
sys.argv = ["rlflow", "validate", {path!r}]
from rlflow.cli.main import main
try:
    main()
except SystemExit as exc:
    print(json.dumps([exc.code, sorted(sys.modules)]), file=sys.stderr)
"""
PARQUET = {"pyarrow", "numpy"}  # the Parquet reader and what it imports


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "pipelines").glob("*.yaml")))
def test_every_shipped_pipeline_imports_only_what_its_rules_need(name):
    """Nothing heavy; Parquet's reader only to read Parquet data, the reference backend only for a remote
    resource, and no stage kind's module but those of the kinds the pipeline declares or its plan adds."""
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan
    from rlflow.schemas.project import load_project_config
    from rlflow.stages.registry import BUILTIN_KINDS

    path = f"pipelines/{name}"
    result = subprocess.run(
        [sys.executable, "-c", MODULES.format(path=path)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    code, modules = json.loads(result.stderr.strip().splitlines()[-1])
    assert code == 0, result.stderr
    tops = {module.split(".")[0] for module in modules}
    assert not tops & {*HEAVY, "typer", "click"}
    spec = load_pipeline(REPO / path, project=load_project_config(REPO)).spec
    files = [str(file) for file in (spec.data.train, spec.data.val) if file]
    parquet = spec.data.format == "parquet" or any(file.endswith(".parquet") for file in files)
    assert tops & PARQUET == (PARQUET if parquet else set())
    remote = any(resource.type == "remote" for resource in spec.resources.values())
    assert ("rlflow.backends.remote.reference" in modules) == remote
    plan = compile_plan(spec)
    used = {stage.uses for stage in spec.stages} | {stage.kind for stage in (*plan.init, *plan.step)}
    kind_modules = {target.partition(":")[0]: kind for kind, target in BUILTIN_KINDS.items()}
    assert {kind_modules[m] for m in modules if m in kind_modules} <= used


def test_schema_command(tmp_path):
    result = rlflow("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["$schema"].startswith("https://json-schema.org/") and "StageSpec" in schema["$defs"]
    assert schema["properties"]["critic"]["$ref"] == "#/$defs/CriticSpec" and "CriticSpec" in schema["$defs"]
    out = tmp_path / "sub" / "pipeline.schema.json"
    assert rlflow("schema", "--output", str(out)).returncode == 0
    assert json.loads(out.read_text()) == schema


@pytest.mark.parametrize("args", [("validate", "--help"), ("schema", "--help")])
def test_help(args):
    result = rlflow(*args)
    assert result.returncode == 0 and "Usage" in result.stdout


def test_validate_help_says_what_verl_does():
    text = " ".join(rlflow("validate", "--help", env={"COLUMNS": "300"}).stdout.split())  # one line per option
    assert "--verl" in text and "PPOTrainerSync" in text and "the exit code stays 0" in text


@pytest.mark.parametrize(
    "args",
    [
        ["pipelines/bird_grpo.yaml"],
        ["pipelines/bird_grpo.yaml", "--json"],
        ["pipelines/bird_grpo.yaml", "--set", "trainer.total_steps=0", "-s", "algorithm.n=1"],
        ["pipelines/bird_grpo.yaml", "--set", "algorithm.clip_ratio=0.3"],
        ["pipelines/bird_grpo.yaml", "pipelines/missing.yaml", "--json"],
        ["pipelines/bird_grpo.yaml", "-s", "bird_root=/nowhere"],
        ["pipelines/bird_grpo.yaml", "-s", "bird_root=/nowhere", "--no-check-paths"],
        ["--check-paths", "pipelines/bird_grpo.yaml", "-s", "model_path=models/none"],
        ["pipelines/bird_grpo.yaml", "--verl"],
        ["--verl", "pipelines/bird_grpo.yaml", "--json"],
        ["pipelines/bird_grpo.yaml", "--print", "--drop", "ref_log_prob", "-s", "algorithm.use_kl_loss=false"],
        ["pipelines/bird_grpo.yaml", "pipelines/ranking_grpo.yaml", "--print", "--json"],
        ["pipelines/bird_grpo.yaml", "--drop", "ref_log_prob"],
        ["pipelines/bird_grpo.yaml", "--print", "--verl"],
    ],
)
def test_plain_command_line_skips_typer_and_answers_as_typer_does(args, capsys, monkeypatch):
    from typer.testing import CliRunner

    from rlflow.cli.app import app
    from rlflow.cli.validate_report import fast_path

    monkeypatch.chdir(REPO)
    code = fast_path(["validate", *args])
    fast = capsys.readouterr()
    full = CliRunner().invoke(app, ["validate", *args])
    assert code == full.exit_code
    assert fast.out + fast.err == full.output


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["run", "x.yaml"],
        ["validate"],
        ["validate", "--help"],
        ["validate", "-h"],
        ["validate", "x.yaml", "--strict"],
    ],
)
def test_anything_else_goes_to_the_full_cli(argv):
    from rlflow.cli.validate_report import fast_path

    assert fast_path(argv) is None


def test_plain_validate_never_imports_typer():
    code = (
        "import sys; sys.argv = ['rlflow', 'validate', 'pipelines/bird_grpo.yaml']\n"
        "from rlflow.cli.main import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('typer' in sys.modules, 'click' in sys.modules, file=sys.stderr)"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.stderr.strip().splitlines()[-1] == "False False", result.stderr


def test_a_plugin_next_to_rlflow_yaml_imports_without_pythonpath(tmp_path):
    """The installed `rlflow` script from a subfolder: only the project root can hold the plugin."""
    (tmp_path / "rlflow.yaml").write_text("vars: {bird_root: b, model_path: builtin:tiny-qwen2}\nplugins: [my_kinds]\n")
    (tmp_path / "my_kinds.py").write_text(
        "from rlflow.stages.base import StageKind\n"
        "from rlflow.stages.registry import register_stage\n\n\n"
        "@register_stage\n"
        "class Noop(StageKind):\n"
        "    name = 'my_noop'\n"
        "    allowed_on = frozenset({'cpu'})\n\n"
        "    def run(self, batch, ctx):\n"
        "        return batch\n"
    )
    (tmp_path / "pipelines").mkdir()
    reward = "  - {name: reward,       uses: text2sql_reward, on: reward_pool}\n"
    text = (REPO / BIRD).read_text().replace(reward, reward + "  - {name: noop, uses: my_noop, on: reward_pool}\n")
    (tmp_path / "pipelines" / "p.yaml").write_text(text)
    script = Path(sys.executable).parent / "rlflow"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    args = [str(script), "validate", "--no-check-paths", "p.yaml"]
    run = subprocess.run(args, cwd=tmp_path / "pipelines", capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0 and "p.yaml: ok" in run.stdout, run.stderr
    (tmp_path / "my_kinds.py").unlink()
    run = subprocess.run(args, cwd=tmp_path / "pipelines", capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"from the project root {tmp_path.resolve()}" in run.stderr and "add its folder to PYTHONPATH" in run.stderr


def test_thousands_of_problems_print_a_bounded_listing_and_json_has_every_one():
    sets = [arg for i in range(2000) for arg in ("--set", f"nope{i}=1")]
    result = rlflow("validate", BIRD, *sets)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 102, len(lines)  # 100 problems, the rest counted, the total
    assert lines[-2] == f"{BIRD}: ... and 1900 more problems (every one: --json)"
    assert lines[-1] == "2000 problems in 1 file"
    listed = json.loads(rlflow("validate", BIRD, "--json", *sets).stdout)
    assert len(listed["files"][0]["diagnostics"]) == 2000


@pytest.mark.parametrize("name", ["bad\nname", "x\u202eevil", "a\x1bcb", "z\u200bw"])
def test_a_name_with_control_or_bidi_characters_is_shown_escaped_on_one_line(name):
    result = rlflow("validate", BIRD, "--set", f"trainer.{name}=1")
    assert result.returncode == 2
    problem, total = result.stderr.splitlines()
    assert total == "1 problem in 1 file"
    assert all(ch.isprintable() for ch in problem), problem
    shown = "".join(ch if ch.isprintable() else f"\\u{ord(ch):04x}" for ch in name)
    assert problem.startswith(f"{BIRD}:") and f"trainer.{shown}: --set trainer.{shown}=1" in problem, problem
