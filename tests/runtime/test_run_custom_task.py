"""Any task end to end: a verl-format parquet file and a reward function of the user's own, trained by ``rlflow run``.

Real parts only: the real CLI in a subprocess, Ray, torch, pyarrow, and the reward function run
in its child process. The shipped ranking pipeline gets a two-step smoke run the same way.
"""

from __future__ import annotations

import textwrap

import pytest
from runtime_helpers import REPO, read_jsonl, rlflow

SOURCES = ("capitals", "rivers")
TWO_STEPS = [
    "--set",
    "trainer.total_steps=2",
    "--set",
    "trainer.test_freq=2",
    "--set",
    "trainer.save_freq=-1",
]
REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """1 when the response mentions the answer; the row's index proves extra_info arrived."""
    assert extra_info["index"] >= 0 and data_source in ("capitals", "rivers")
    correct = float(str(ground_truth).lower() in solution_str.lower())
    return {"score": correct + 0.01 * len(solution_str), "acc": correct}
'''
PIPELINE = """
name: custom-task
model: {path: "builtin:tiny-qwen2"}
data: {format: verl, train: data/train.parquet, val: data/val.parquet, max_prompt_length: 64, max_response_length: 12}
algorithm: {n: 4}
trainer: {train_batch_size: 4, ppo_mini_batch_size: 2, ppo_micro_batch_size_per_gpu: 4, optim: {lr: 1.0e-4}}
resources:
  actor_pool: {type: local, device: cpu, cpus_per_worker: 1}
  reward_pool: {type: cpu, workers: 1}
stages:
  - {name: generate,     uses: generate,        on: actor_pool}
  - {name: reward,       uses: reward_function, on: reward_pool, with: {function: "rewards/task.py:compute_score"}}
  - {name: old_log_prob, uses: old_log_prob,    on: actor_pool}
  - {name: advantage,    uses: grpo_advantage,  on: driver}
  - {name: update_actor, uses: update_actor,    on: actor_pool}
  - {name: sync_weights, uses: sync_weights,    on: actor_pool}
"""


def write_verl_parquet(path, count: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {
            "data_source": SOURCES[i % 2],
            "prompt": [
                {"role": "system", "content": "Answer briefly."},
                {"role": "user", "content": f"Question {i}: name a {SOURCES[i % 2][:-1]}."},
            ],
            "ability": "geography",
            "reward_model": {"style": "rule", "ground_truth": "a"},
            "extra_info": {"index": i, "split": path.stem},
        }
        for i in range(count)
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


@pytest.fixture
def custom_project(tmp_path):
    (tmp_path / "rlflow.yaml").write_text("runs_dir: runs\n")
    write_verl_parquet(tmp_path / "data" / "train.parquet", 16)
    write_verl_parquet(tmp_path / "data" / "val.parquet", 6)
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "task.py").write_text(textwrap.dedent(REWARD))
    (tmp_path / "task.yaml").write_text(PIPELINE)
    return tmp_path


def test_a_verl_parquet_and_a_reward_function_train_with_val_metrics_per_source(custom_project):
    assert rlflow("validate", "task.yaml", cwd=custom_project).returncode == 0
    run_dir = custom_project / "runs" / "r"
    result = rlflow("run", "task.yaml", "--run-dir", str(run_dir), *TWO_STEPS, cwd=custom_project)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for step in (0, 2):
        for source in SOURCES:
            assert f"val-core/{source}/acc/mean@1" in metrics[step], sorted(metrics[step])
            assert f"val-aux/{source}/reward/mean@1" in metrics[step]
            assert metrics[step][f"val-aux/{source}/reward/mean@1"] > 0  # the length bonus: the function ran
    assert metrics[1]["reward/error_rate"] == 0 and metrics[1]["reward/timeout_rate"] == 0
    assert "reward/acc" in metrics[1] and metrics[1]["critic/score/mean"] > 0


def test_a_reward_function_that_fails_on_every_row_stops_the_run_naming_it(custom_project):
    (custom_project / "rewards" / "task.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 1 / 0\n"
    )
    result = rlflow("run", "task.yaml", "--run-dir", str(custom_project / "runs" / "r"), *TWO_STEPS, cwd=custom_project)
    assert result.returncode != 0
    assert "compute_score" in result.stderr and "ZeroDivisionError" in result.stderr, result.stderr[-3000:]


def test_a_bad_prompt_row_stops_the_run_naming_the_file_and_row(custom_project):
    """The data loads before Ray starts: its error ends the run with exit 2 at once, leaving no run directory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = custom_project / "data" / "train.parquet"
    rows = pq.read_table(path).to_pylist()
    rows[3]["prompt"] = [{"role": "user"}]
    pq.write_table(pa.Table.from_pylist(rows), path)
    run_dir = custom_project / "runs" / "r"
    result = rlflow("run", "task.yaml", "--run-dir", str(run_dir), *TWO_STEPS, cwd=custom_project, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "train.parquet" in result.stderr and "row 3" in result.stderr, result.stderr[-3000:]
    assert not run_dir.exists(), "a run that fails before its first step leaves no directory"


def test_the_shipped_ranking_pipeline_runs_two_steps(tmp_path):
    run_dir = tmp_path / "r"
    sets = ["trainer.train_batch_size=4", "trainer.ppo_mini_batch_size=2", "algorithm.n=4", "data.max_val_samples=8"]
    args = [a for s in sets for a in ("--set", s)]
    result = rlflow("run", str(REPO / "pipelines" / "ranking_grpo.yaml"), "--run-dir", str(run_dir), *args, *TWO_STEPS)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    sources = ("largest", "smallest", "second_largest", "second_smallest")
    assert {f"val-core/{source}/acc/mean@1" for source in sources} <= set(metrics[-1])
    assert metrics[1]["reward/error_rate"] == 0 and "reward/format_ok" in metrics[1]


MANY_METRICS = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": 1.0, **{f"m{i}": float(i) for i in range(70)}}
"""


def test_the_metric_cap_warning_of_a_reward_worker_reaches_the_console(custom_project):
    """A reward function returning more extras than the cap is warned of in the reward pool's Ray worker; the
    warning reaches the driver's console with the stage's result, naming the pool and the worker."""
    (custom_project / "rewards" / "task.py").write_text(MANY_METRICS)
    sets = ["trainer.total_steps=1", "trainer.test_freq=-1", "trainer.save_freq=-1", "trainer.val_before_train=false"]
    args = [a for s in sets for a in ("--set", s)]
    result = rlflow("run", "task.yaml", "--run-dir", str(custom_project / "runs" / "r"), *args, cwd=custom_project)
    assert result.returncode == 0, result.stderr[-3000:]
    warned = [line for line in result.stderr.splitlines() if "extra numbers" in line]
    assert len(warned) == 1, result.stderr[-3000:]
    relayed = "cpu pool 'reward_pool', worker 0: reward function rewards/task.py:compute_score returned more than 64"
    assert relayed in warned[0]


DETACHING_REWARD = """
import os, subprocess
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    child = subprocess.Popen(["sleep", "300"], start_new_session=True)
    with open(os.path.join(os.path.dirname(__file__), "children.txt"), "a") as f:
        f.write(f"{child.pid}\\n")
    {ending}
"""


@pytest.mark.parametrize("ending", ["return 1.0", "raise ValueError('no')"])
def test_a_reward_functions_detached_children_end_with_the_run(custom_project, ending):
    """A child started in a session of its own escapes the worker's process group: the worker closes its
    stages' reward processes on shutdown, whose supervisor kills every descendant."""
    import os
    import time

    (custom_project / "rewards" / "task.py").write_text(DETACHING_REWARD.replace("{ending}", ending))
    sets = ["--set", "trainer.total_steps=1", "--set", "trainer.test_freq=-1", "--set", "trainer.save_freq=-1"]
    rlflow("run", "task.yaml", "--run-dir", str(custom_project / "runs" / "r"), *sets, cwd=custom_project)
    pids = [int(p) for p in (custom_project / "rewards" / "children.txt").read_text().split()]
    assert pids, "the reward function ran"

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:  # a zombie waiting for its reaper is gone for our purpose
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"

    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if alive(p)]
    for pid in left:
        os.kill(pid, 9)
    assert not left, f"{len(left)} of {len(pids)} detached children outlived the run"
