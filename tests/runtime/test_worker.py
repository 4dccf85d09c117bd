"""StageWorker under real Ray: a reward pool's workers run the reward without ever importing torch."""

from __future__ import annotations

import shutil

from runtime_helpers import PLUGINS, REPO, read_jsonl, rlflow, small_sets

from rlflow.assets import BIRD_SAMPLE


def test_a_reward_pool_worker_never_imports_torch(tmp_path):
    """Also: a plugin module next to rlflow.yaml imports, in the driver and the Ray workers, without PYTHONPATH
    (the run starts from a subfolder, so neither the working directory nor PYTHONPATH holds the module)."""
    (tmp_path / "rlflow.yaml").write_text(
        f"vars:\n  model_path: builtin:tiny-qwen2\n  bird_root: {BIRD_SAMPLE}\nplugins: [rlflow_test_probes]\n"
    )
    shutil.copy(PLUGINS / "rlflow_test_probes.py", tmp_path)
    reward = "  - {name: reward,       uses: text2sql_reward, on: reward_pool}\n"
    probe = "  - {name: probe, uses: test_modules_probe, on: reward_pool}\n"
    pipeline = (REPO / "pipelines" / "bird_grpo.yaml").read_text()
    assert reward in pipeline
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "p.yaml").write_text(pipeline.replace(reward, reward + probe))
    sets = small_sets("trainer.total_steps=1", "trainer.test_freq=-1", "trainer.val_before_train=false")
    result = rlflow(
        "run",
        "p.yaml",
        "--run-dir",
        str(tmp_path / "run"),
        *sets,
        cwd=tmp_path / "pipelines",
        env={"PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    step = read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]
    assert step["critic/score/mean"] >= 0, "the reward ran, on the same workers"
    assert step["probe/torch_loaded"] == 0.0 and step["probe/transformers_loaded"] == 0.0
    assert step["probe/verl_loaded"] == 0.0


def test_a_stages_warnings_are_collected_for_the_driver():
    """What rlflow's loggers warn of during a stage goes back with its result (capped); other loggers' does not."""
    import logging

    from rlflow.runtime.worker import MAX_RELAYED, collected_warnings

    with collected_warnings() as warnings:
        logging.getLogger("rlflow.tools.report").warning("tool %r: timeout", "run_sql")
        logging.getLogger("rlflow.tools.report").info("not a warning")
        logging.getLogger("somebody.else").warning("not ours")
        for i in range(2 * MAX_RELAYED):
            logging.getLogger("rlflow.reward").warning("failure %d", i)
    logging.getLogger("rlflow").warning("after the stage")
    assert warnings[0] == "tool 'run_sql': timeout" and len(warnings) == MAX_RELAYED
