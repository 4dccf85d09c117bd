"""The BIRD agent on real Ray, through the CLI: two steps of pipelines/bird_grpo_agent.yaml on a local pool,
and the same agent with its rollout on the reference remote backend (the server runs the agent loop).

The agent warm start (builtin:tiny-sql-agent) calls its SQL tool from step 1, so the transcripts hold
tool turns: verl's ``num_turns/*`` exceed a single turn's 2 and the tool's own metrics appear.
"""

from __future__ import annotations

from runtime_helpers import REPO, as_args, read_jsonl, rlflow

AGENT = str(REPO / "pipelines" / "bird_grpo_agent.yaml")
REMOTE = str(REPO / "pipelines" / "bird_grpo_remote.yaml")
TINY = (
    "trainer.train_batch_size=4",
    "trainer.ppo_mini_batch_size=4",
    "trainer.ppo_micro_batch_size_per_gpu=8",
    "algorithm.n=2",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    "trainer.save_freq=-1",
    "trainer.total_steps=2",
)
# what bird_grpo_agent.yaml adds to bird_grpo.yaml, as --set paths on the remote pipeline
AGENT_ON_REMOTE = (
    "model_path=rlflow/assets/models/tiny-sql-agent",
    "data.prompt_template=pipelines/templates/text2sql_agent.j2",
    "data.max_response_length=256",
    "stages.generate.with.multi_turn.enable=true",
    "stages.generate.with.multi_turn.max_assistant_turns=2",
    "stages.generate.with.multi_turn.max_user_turns=1",
    "stages.generate.with.multi_turn.max_tool_response_length=200",
    "stages.generate.with.multi_turn.tool_config_path=pipelines/tools/bird_sql.yaml",
    "stages.reward.with.extract=fenced",
    "resources.arctic.config.device=cpu",
)


def check_agent_run(run_dir) -> None:
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for step in metrics:
        assert 2 <= step["num_turns/min"] <= step["num_turns/max"] <= 4  # two model turns, one tool turn at most
        assert step["num_turns/mean"] > 2  # the warm start calls its tool
        assert step["tool/run_sql/calls"] > 0 and 0 <= step["tool/run_sql/error_ratio"] <= 1
        assert step["actor/pg_loss"] == step["actor/pg_loss"]
    dumped = read_jsonl(run_dir / "transcripts.jsonl")
    assert sorted({d["step"] for d in dumped}) == [1, 2]
    assert any("run_sql" in d["output"] for d in dumped)


def test_two_agent_steps_on_ray(tmp_path):
    run_dir = tmp_path / "run"
    done = rlflow("run", AGENT, "--run-dir", str(run_dir), *as_args(TINY))
    assert done.returncode == 0, done.stdout + done.stderr
    check_agent_run(run_dir)


def test_two_agent_steps_with_the_rollout_on_the_reference_backend(tmp_path):
    run_dir = tmp_path / "run"
    done = rlflow("run", REMOTE, "--run-dir", str(run_dir), *as_args([*TINY, *AGENT_ON_REMOTE]))
    assert done.returncode == 0, done.stdout + done.stderr
    check_agent_run(run_dir)
    trace = read_jsonl(run_dir / "trace.jsonl")
    assert {r["resource"] for r in trace if r["stage"] == "generate"} == {"arctic"}


def test_a_tool_that_fails_on_every_call_is_on_the_console_and_in_its_log(tmp_path):
    """The tool runs in a Ray worker: its first failure reaches the driver's console, naming the worker, the
    tool and the line of the tool's file; every failed call is in <run dir>/tools/rank0.log."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "broken_sql.py").write_text(
        "from rlflow.tools.sql import SqlTool\n\n\nclass BrokenSql(SqlTool):\n"
        "    async def execute(self, instance_id, parameters, **kwargs):\n"
        "        raise RuntimeError('the database went away')\n"
    )
    shipped = (REPO / "pipelines" / "tools" / "bird_sql.yaml").read_text()
    (tools / "tools.yaml").write_text(shipped.replace("rlflow.tools.sql.SqlTool", "broken_sql.BrokenSql"))
    run_dir = tmp_path / "run"
    sets = [*TINY, "trainer.total_steps=1", f"stages.generate.with.multi_turn.tool_config_path={tools / 'tools.yaml'}"]
    done = rlflow("run", AGENT, "--run-dir", str(run_dir), *as_args(sets))
    assert done.returncode == 0, done.stdout + done.stderr
    assert read_jsonl(run_dir / "metrics.jsonl")[0]["tool/run_sql/error_ratio"] == 1.0
    failure = "tool 'run_sql': raised RuntimeError: RuntimeError at broken_sql.py:6 in execute: the database went away"
    assert f"local pool 'actor_pool', worker 0: {failure}" in done.stderr, done.stderr[-3000:]
    assert done.stderr.count(failure) == 1  # once per kind of failure
    log = (run_dir / "tools" / "rank0.log").read_text()
    assert log.count("tool 'run_sql' raised RuntimeError") > 1
