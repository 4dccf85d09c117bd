"""Smoke tests of the benchmark scripts at ``--quick`` sizes.

Three benchmarks run for real, as a user runs them (``python -m benchmarks.bench_x`` in a
subprocess, from the repository root): compile/validate
scaling (pure Python), rollout speed (the tiny model, both in-process engines, vLLM left
out) and the GPU benchmark's CPU path (the tiny model through every stage and a 3-step run). Each must exit 0, print its table and write a JSON result whose figures are real
measurements; ``run_all``'s quick summary must then turn those files into a Markdown table with a
verdict per goal and the commit measured. The slow benchmarks (Ray runs, TRL) are not run here:
``python -m benchmarks.run_all --quick`` is their smoke test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import common, run_all


def _run(module: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run(
        [sys.executable, "-m", f"benchmarks.{module}", "--quick", "--out", str(out), *extra],
        cwd=common.ROOT,
        capture_output=True,
        text=True,
        timeout=600,  # a hang guard: on a loaded 2-core machine bench_gpu --quick alone takes minutes
        env=env,
    )


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, dict]]:
    """compile_quick.json, generation_quick.json and gpu_quick.json, written by the real scripts into one folder."""
    folder = tmp_path_factory.mktemp("bench-results")
    out = {}
    for name, extra in (("compile", ()), ("generation", ("--skip-vllm",)), ("gpu", ())):
        path = folder / f"{name}_quick.json"
        done = _run(f"bench_{name}", path, *extra)
        assert done.returncode == 0, f"bench_{name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        out[name] = (done, json.loads(path.read_text()))
    out["folder"] = folder
    return out


def test_compile_benchmark_times_every_size(results):
    done, report = results["compile"]
    assert "| stages |" in done.stdout
    assert sorted(int(s) for s in report["sizes"]) == [10, 100]
    for size in report["sizes"].values():
        assert size["validate_s"] > 0 and size["compile_s"] > 0
        assert len(size["samples"]) == report["rounds"]
    assert report["growth_between"] == [10, 100]
    assert {row["figure"].split(":")[0] for row in report["summary"]} == {"validate", "compile"}
    assert all(isinstance(row["met"], bool) for row in report["summary"])


def test_generation_benchmark_compares_both_engines(results):
    done, report = results["generation"]
    assert "torch / hf:" in done.stdout
    assert set(report["arms"]) == {"torch", "hf"}
    rows, max_new = report["sequences"], report["max_new_tokens"]
    for arm in report["arms"].values():
        assert 0 < arm["tokens_median"] <= rows * max_new
        assert arm["tokens_per_s_median"] > 0
    assert report["torch_over_hf"] == pytest.approx(
        report["arms"]["torch"]["tokens_per_s_median"] / report["arms"]["hf"]["tokens_per_s_median"]
    )
    assert report["vllm"]["status"] == "skipped"


def test_gpu_benchmark_measures_every_stage_and_a_run(results):
    """On a CPU the figures prove the path: every stage measured, goals not judged (no GPU figures)."""
    done, report = results["gpu"]
    assert report["machine"]["device"] == "cpu" and report["rounds"] == 1
    rollout = report["rollout"]
    for arm in ("rlflow", "dynamic_cache_loop", "hf_generate"):
        assert rollout[arm]["tokens_per_s"] > 0
    assert rollout["over_hf"] == pytest.approx(
        rollout["rlflow"]["tokens_per_s"] / rollout["hf_generate"]["tokens_per_s"]
    )
    passes, packed = report["passes"], report["packed"]
    for name in ("old_log_prob", "ref_log_prob", "update_actor"):
        assert passes[name]["seconds"] > 0 and passes[name]["mfu"] > 0, name
        assert 0 < passes[name]["mfu_achieved"] < passes[name]["mfu"], (
            name
        )  # shared prompts: less work than verl counts
        assert packed[name]["seconds"] > 0 and packed[name]["mfu_achieved"] > 0, name
    assert not passes["packed"] and packed["packed"]
    for name in ("old_log_prob", "ref_log_prob"):  # the profiler's trace of each pass, next to the JSON
        trace = Path(passes["traces"][name])
        assert trace.parent == results["folder"] / "gpu_quick_traces" and json.loads(trace.read_text())["traceEvents"]
        assert "aten::" in (trace.parent / f"{name}.kernels.txt").read_text()
    assert report["complete"] and "scale" not in report  # the 1.5B-class point needs a GPU
    run = report["run"]
    assert run["exit_code"] == 0 and run["step_s"] > 0
    assert {"generate", "reward", "old_log_prob", "ref_log_prob", "update_actor"} <= set(run["stage_s"])
    assert [row["met"] for row in report["summary"]] == [None] * len(report["summary"])
    assert "| rollout tokens/s: rlflow / HF generate" in done.stdout


def test_results_record_the_commit_they_were_measured_on(results):
    head = common.commit_id().removesuffix("-dirty")
    assert all(results[name][1]["commit"].removesuffix("-dirty") == head for name in ("compile", "generation", "gpu"))


def test_summary_turns_results_into_a_verdict_table(results, monkeypatch):
    monkeypatch.setattr(common, "RESULTS", results["folder"])
    path = run_all.write_summary(quick=True, outcomes={"compile": {"exit_code": 0}, "step": {"exit_code": 1}})
    text = path.read_text()
    assert path == results["folder"] / "SUMMARY_quick.md"
    assert "| benchmark " in text and "python -m benchmarks.run_all --quick" in text
    compile_rows = [
        [cell.strip() for cell in line.strip("| ").split("|")]
        for line in text.splitlines()
        if line.startswith("| compile")
    ]
    assert len(compile_rows) == 2
    compiled = results["compile"][1]
    measured_on = run_all.measured_on(compiled["commit"], compiled["finished"][:10])  # "stale: ..." on a dirty tree
    assert all(row[4] in ("yes", "**no**") and row[5] == measured_on for row in compile_rows)
    assert any(line.startswith("| step") and "(not run)" in line for line in text.splitlines())
    assert "- step: exited with 1 (log: runs/bench-logs/step_quick.log)" in text


def test_rotations_put_every_arm_first_once():
    orders = common.rotations(["a", "b", "c"], 3)
    assert [o[0] for o in orders] == ["a", "b", "c"]
    assert all(sorted(o) == ["a", "b", "c"] for o in orders)


def test_without_a_gpu_the_gpu_checks_say_so_and_write_nothing(tmp_path):
    """bench_gpu at full size skips (exit 0, no result); scripts/gpu_check.sh stops at its first check (exit 2)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the GPU checks run for real (RLFLOW_TEST_GPU=1 and scripts/gpu_check.sh)")
    out = tmp_path / "gpu.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_gpu", "--out", str(out)],
        cwd=common.ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and "skipped, no CUDA GPU" in done.stdout and not out.exists()
    env = {**os.environ, "OUT": str(tmp_path / "check"), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    check = subprocess.run(
        ["bash", "scripts/gpu_check.sh"], cwd=common.ROOT, capture_output=True, text=True, env=env, timeout=120
    )
    assert check.returncode == 2 and "no CUDA GPU" in check.stderr
    assert not (tmp_path / "check" / "gpu.json").exists()
