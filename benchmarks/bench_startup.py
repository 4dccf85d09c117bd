"""Start-up and memory: from ``rlflow run`` to its first finished step, next to TRL; peak RSS of the run.

    python -m benchmarks.bench_startup            # 2 interleaved rounds, the pipeline's default sizes (16 x 8 x 48)
    python -m benchmarks.bench_startup --quick    # tiny sizes, 1 round

rlflow arm: ``rlflow run pipelines/bird_grpo.yaml`` (2 steps, no validation or checkpoints)
in a fresh process; the clock starts just before the process is spawned. From trace.jsonl
(wall-clock start/end of every stage execution): when the pools were ready (the init weight
sync began), when step 1 began (its first stage) and when it finished (its last stage).

TRL arm: trl_grpo_run.py (GRPOTrainer in .venv-trl, same model, prompts and sizes, 1 step);
the same three moments come from its callbacks (trainer built, on_step_begin, on_step_end).

Goal (the issue's): rlflow reaches its first finished step no later than TRL does plus Ray's
own ~4 s of initialisation. The step itself is part of both figures, so the start-up alone
(to the first step's start) is reported too.

CPU: the tree's CPU seconds (user + system, every process) from the spawn to the first step's
start, which a busy neighbour moves far less than wall time; the rlflow arm's is split by process
group as well (driver, Ray's daemons, each worker class), printed after each of its rounds.

Memory: the summed PSS of the ``rlflow run`` process tree (Ray's GCS, raylet, daemons, workers
and the driver; shared pages split between the processes mapping them), sampled every 0.2 s over
the whole run: the real footprint, goal <= 1.25 GiB. The summed RSS, which counts shared pages
once per process (an upper bound), is reported beside it, and TRL's peaks too; so is the PSS of
each process group at the moment of the peak (``peak_pss_by_group_mib``), which says where it goes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks import common

NAME = "startup"
PIPELINE = "pipelines/bird_grpo.yaml"
RAY_INIT_S = 4.0
MEMORY_GOAL_GIB = 1.25
BASE_SETS = ("trainer.test_freq=-1", "trainer.val_before_train=false", "trainer.save_freq=-1")


def rlflow_arm(sets: list[str], work: Path, timeout: float) -> dict:
    result = common.run_rlflow(
        PIPELINE,
        [*sets, "trainer.total_steps=2"],
        work / "rlflow-run",
        log=work / "rlflow.log",
        timeout=timeout,
        sample_memory=True,
    )
    trace, t0 = result.pop("trace"), result["start"]
    step1 = [r for r in trace if r["step"] == 1]
    init = [r for r in trace if r["step"] == 0]
    result.pop("metrics")
    if not step1:
        return result
    result.update(
        ready_s=min(r["start"] for r in init) - t0 if init else None,
        first_step_start_s=min(r["start"] for r in step1) - t0,
        first_step_end_s=max(r["end"] for r in step1) - t0,
    )
    return result


def trl_arm(sets: list[str], model_dir: Path, work: Path, timeout: float) -> dict:
    if not common.TRL_PYTHON.exists():
        return {"skipped": "TRL is not installed (bash scripts/setup_trl_venv.sh creates .venv-trl)"}
    out = work / "trl.json"
    out.unlink(missing_ok=True)
    cmd = [
        str(common.TRL_PYTHON),
        "-m",
        "benchmarks.trl_grpo_run",
        "--model-dir",
        str(model_dir),
        "--steps",
        "1",
        "--out",
        str(out),
        *[f"--set={s}" for s in sets if not s.startswith("model_path=")],
    ]
    result = common.run_process(cmd, log=work / "trl.log", timeout=timeout, sample_memory=True)
    samples = result.pop("cpu_samples")
    result.pop("cpu_samples_by_process")
    if result["exit_code"] != 0 or not out.exists():
        result["error"] = common.tail(work / "trl.log")
        return result
    trl, t0 = json.loads(out.read_text()), result["start"]
    result.update(
        ready_s=trl["trainer_ready"] - t0,
        first_step_start_s=trl["steps"][0]["begin"] - t0,
        first_step_end_s=trl["steps"][0]["end"] - t0,
        cpu_s_to_first_step=common.cpu_between(samples, samples[0][0], trl["steps"][0]["begin"]) if samples else None,
    )
    return result


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(p, rounds=2)
    p.add_argument("--skip-trl", action="store_true")
    p.add_argument("--timeout", type=float, default=3600)
    return p.parse_args(argv)


FIGURES = ("ready_s", "first_step_start_s", "first_step_end_s", "cpu_s_to_first_step", "peak_rss_gib", "peak_pss_gib")


def summary_rows(runs: dict[str, list[dict]]) -> list[dict]:
    """The goals judged round by round (each round runs both arms): a start-up goal is met only when
    rlflow is within TRL + Ray's init in every round; the memory goal holds for the largest peak."""
    rl_runs, trl_runs = runs.get("rlflow", []), runs.get("trl", [])
    summary = []
    for key, label in (
        ("first_step_end_s", "start-up to first finished step"),
        ("first_step_start_s", "start-up to first step start"),
    ):
        pairs = [(a.get(key), b.get(key)) for a, b in zip(rl_runs, trl_runs)]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
        skipped = next((r["skipped"] for r in trl_runs if "skipped" in r), "")
        summary.append(
            common.goal_row(
                NAME,
                f"{label}: rlflow run vs TRL, every round",
                common.median(a for a, _ in pairs),
                f"<= TRL + {RAY_INIT_S:g} s in every round",
                all(a <= b + RAY_INIT_S for a, b in pairs) if pairs else None,
                "; ".join(f"{common.fmt(a)} s vs TRL {common.fmt(b)} s" for a, b in pairs) or "n/a",
                skipped,
            )
        )
    peaks = [r.get("peak_pss_gib") for r in rl_runs if r.get("peak_pss_gib") is not None]
    peak = max(peaks) if peaks else None
    rss = max((r.get("peak_rss_gib") or 0 for r in rl_runs), default=None)
    trl_peak = max((r.get("peak_pss_gib") or 0 for r in trl_runs), default=None)
    summary.append(
        common.goal_row(
            NAME,
            "peak PSS of the whole run (Ray processes included), largest of the rounds",
            peak,
            f"<= {MEMORY_GOAL_GIB:g} GiB",
            None if peak is None else peak <= MEMORY_GOAL_GIB,
            None
            if peak is None
            else f"{peak:.2f} GiB PSS, {common.fmt(rss)} GiB RSS (TRL: {common.fmt(trl_peak)} GiB PSS)",
        )
    )
    return summary


def rows_from_report(report: dict) -> list[dict]:
    """The summary rows of a result file by the current rules (judged round by round)."""
    return summary_rows(report.get("runs", {}))


def main(argv=None) -> None:
    args = parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    model_dir, model_label = common.bench_model_dir()
    sets = [f"model_path={model_dir}", *BASE_SETS, *(common.QUICK_SETS if args.quick else ())]
    arms = ["rlflow"] if args.skip_trl else ["rlflow", "trl"]
    work = common.ROOT / "runs" / "bench-startup"
    before = common.machine()
    runs: dict[str, list[dict]] = {arm: [] for arm in arms}
    for r, order in enumerate(common.rotations(arms, rounds)):
        for arm in order:
            print(f"round {r + 1}/{rounds}: {arm} ...", flush=True)
            place = work / f"round{r + 1}"
            result = (
                rlflow_arm(sets, place, args.timeout)
                if arm == "rlflow"
                else trl_arm(sets, model_dir, place, args.timeout)
            )
            runs[arm].append(result)
            print(
                "  "
                + ", ".join(f"{k}={common.fmt(result.get(k))}" for k in FIGURES)
                + (f" ERROR {result['error'][-300:]}" if "error" in result else "")
                + (f" {result['skipped']}" if "skipped" in result else ""),
                flush=True,
            )
            if result.get("cpu_s_by_process_to_first_step"):
                parts = sorted(result["cpu_s_by_process_to_first_step"].items(), key=lambda kv: -(kv[1] or 0))
                print("  CPU s to first step: " + ", ".join(f"{k} {common.fmt(v)}" for k, v in parts), flush=True)
    arms_out = {
        arm: {k: common.median(res.get(k) for res in results) for k in FIGURES}
        | {"skipped": next((res["skipped"] for res in results if "skipped" in res), None)}
        for arm, results in runs.items()
    }
    print(
        common.markdown_table(
            [
                "arm",
                "pools/trainer ready s",
                "first step starts s",
                "first step ends s",
                "CPU s to first step",
                "peak RSS GiB",
                "peak PSS GiB",
            ],
            [[a, *[v[k] for k in FIGURES]] for a, v in arms_out.items()],
        )
    )
    summary = summary_rows(runs)
    report = {
        "machine": {**before, "load_avg_1m_after": common.machine()["load_avg_1m"]},
        "model": model_label,
        "sets": sets,
        "rounds": rounds,
        "arms": arms_out,
        "runs": runs,
        "summary": summary,
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
