"""The price of a remote backend: step time through a CPU forwarder, and the bytes it relays.

    python -m benchmarks.bench_forwarder            # 3 interleaved rounds of 5 steps per arm
    python -m benchmarks.bench_forwarder --quick    # tiny sizes, 1 round

Two arms, ``rlflow run`` as a user runs it, same model, data and sizes (16 prompts x 8
samples x 48 tokens):

- ``local``: pipelines/bird_grpo.yaml, the model in a local actor pool (one Ray actor);
- ``remote``: pipelines/bird_grpo_remote.yaml, the model in the out-of-process ``reference``
  backend, reached through one zero-GPU forwarder over its socket wire.

Step time is the median of ``timing_s/step`` after the first two steps; rounds alternate the
arms. Goal: remote / local <= 1.10 in every round (each round's own ratio; the headline is their
median, with their spread: ``common.round_ratio_row``); three rounds, so that no one noisy round
decides it. Each step's CPU seconds (the whole process tree, the backend's server included) are
reported beside it: they move far less with the neighbours' load.

Traffic: the forwarder's client counts every byte through its socket and reports running
totals as ``forwarder/bytes_sent`` / ``forwarder/bytes_received``; a step's traffic is the
difference between consecutive steps. It is set beside (a) the tensor payload the stages must
exchange, computed from the step's shapes (prompts and masks out; responses, log-probs and
advantages back and forth), and (b) the model's parameter bytes. Goal: only data passes,
i.e. measured bytes within 1.25x of that payload and zero weight bytes (``sync/bytes`` = 0:
the weight sync happens inside the backend).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks import common

NAME = "forwarder"
PIPELINES = {"local": "pipelines/bird_grpo.yaml", "remote": "pipelines/bird_grpo_remote.yaml"}
STEP_GOAL = 1.10
PAYLOAD_GOAL = 1.25
INT64, FLOAT32 = 8, 4


def payload_bytes(rows: int, prompt_width: int, response_width: int) -> dict[str, int]:
    """Tensor bytes the forwarder must relay in one step (texts and frame headers not counted).

    generate: prompts + prompt_mask out; responses + response_mask back. old_log_prob and
    ref_log_prob: prompts, masks, responses out; log-probs (and entropy) back. update_actor:
    the same four plus old log-probs, advantages and reference log-probs out.
    """
    p, r = rows * prompt_width, rows * response_width
    seq = 2 * INT64 * (p + r)  # prompts, prompt_mask, responses, response_mask
    sent = 2 * INT64 * p + 2 * seq + seq + 3 * FLOAT32 * r
    received = 2 * INT64 * r + 2 * FLOAT32 * r + FLOAT32 * r
    return {"sent": sent, "received": received, "total": sent + received}


def parameter_bytes(model_dir: Path) -> int:
    from rlflow.backends.local.models import load_model
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    spec = ModelSpec(path=str(model_dir))
    model = load_model(spec, load_tokenizer(spec, common.ROOT), seed=1, root=common.ROOT)
    return sum(p.numel() * p.element_size() for p in model.parameters())


def traffic(metrics: list[dict], skip: int, rows: int, response_width: int) -> dict:
    """Per-step forwarder bytes (differences of the running totals) and the shapes' payload."""
    steps = []
    previous = {"forwarder/bytes_sent": 0.0, "forwarder/bytes_received": 0.0}
    for m in metrics:
        if "forwarder/bytes_sent" not in m:
            continue
        sent = m["forwarder/bytes_sent"] - previous["forwarder/bytes_sent"]
        received = m["forwarder/bytes_received"] - previous["forwarder/bytes_received"]
        previous = m
        expected = payload_bytes(rows, int(m["prompt_length/max"]), response_width)  # prompts are padded to the longest
        steps.append(
            {
                "step": m["step"],
                "sent": sent,
                "received": received,
                "total": sent + received,
                "payload": expected,
                "sync_bytes": m.get("sync/bytes"),
            }
        )
    steady = [s for s in steps if s["step"] > skip]
    total = common.median(s["total"] for s in steady)
    payload = common.median(s["payload"]["total"] for s in steady)
    return {
        "per_step": steps,
        "bytes_per_step_median": total,
        "payload_per_step_median": payload,
        "measured_over_payload": common.ratio(total, payload),
        "sync_bytes_max": max((s["sync_bytes"] or 0.0 for s in steps), default=None),
    }


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common.common_args(p, rounds=3)
    p.add_argument(
        "--steps", type=int, default=None, help="steps per run (default 5; --quick: 3); the first 2 are warm-up"
    )
    p.add_argument("--timeout", type=float, default=3600)
    return p.parse_args(argv)


def step_row(arms: dict) -> dict:
    """Remote-bound over local-bound step time, round by round (each round runs both side by side)."""
    remote, local = arms.get("remote", {}), arms.get("local", {})
    pairs = zip(remote.get("step_s_per_round", []), local.get("step_s_per_round", []))
    seconds = ", ".join(f"{common.fmt(a)} vs {common.fmt(b)} s" for a, b in pairs)
    cpu = common.ratio(remote.get("cpu_s_median"), local.get("cpu_s_median"))
    return common.round_ratio_row(
        NAME,
        "step time: remote-bound / local-bound",
        remote.get("step_s_per_round", []),
        local.get("step_s_per_round", []),
        f"<= {STEP_GOAL}",
        lambda r: r <= STEP_GOAL,
        f"{seconds}; CPU s/step ratio over all steps {common.fmt(cpu)}",
        "; ".join(e[-200:] for e in remote.get("errors", [])),
    )


def rows_from_report(report: dict) -> list[dict]:
    """The summary rows of a result file by the current rules: the step row from the per-round
    figures, the traffic row (one run's bytes, no rounds) as written."""
    stored = [row for row in report.get("summary", []) if not row["figure"].startswith("step time")]
    return [step_row(report.get("arms", {})), *stored]


def main(argv=None) -> None:
    args = parse_args(argv)
    steps = args.steps or (3 if args.quick else 5)
    rounds = args.rounds or (1 if args.quick else 3)
    skip = 2 if steps > 2 else 0
    model_dir, model_label = common.bench_model_dir()
    sets = [
        f"model_path={model_dir}",
        *common.STEP_SETS,
        *(common.QUICK_SETS if args.quick else ()),
        f"trainer.total_steps={steps}",
    ]
    value = {s.split("=", 1)[0]: int(s.split("=", 1)[1]) for s in sets if s.split("=", 1)[1].isdigit()}
    rows, response_width = value["trainer.train_batch_size"] * value["algorithm.n"], value["data.max_response_length"]
    work = common.ROOT / "runs" / "bench-forwarder"
    before = common.machine()
    runs: dict[str, list[dict]] = {arm: [] for arm in PIPELINES}
    for r, order in enumerate(common.rotations(list(PIPELINES), rounds)):
        for arm in order:
            print(f"round {r + 1}/{rounds}: {arm} ({steps} steps) ...", flush=True)
            result = common.run_rlflow(
                PIPELINES[arm],
                sets,
                work / f"round{r + 1}" / arm,
                log=work / f"round{r + 1}" / f"{arm}.log",
                timeout=args.timeout,
            )
            result.pop("trace")
            runs[arm].append(result)
            print(
                f"  {arm}: step times {[round(m['timing_s/step'], 2) for m in result['metrics']]}"
                f"{' ' + result['error'][-400:] if 'error' in result else ''}",
                flush=True,
            )
    arms = {}
    for arm, results in runs.items():
        per_round = [common.median(common.step_times(res["metrics"], skip)) for res in results]
        arms[arm] = {
            "step_s_median": common.median(t for res in results for t in common.step_times(res["metrics"], skip)),
            "step_s_per_round": per_round,
            "cpu_s_median": common.median(
                t for res in results for t in common.step_times(res["metrics"], skip, "cpu_s/step")
            ),
            "cpu_s_by_process_median": common.cpu_by_process_median(
                [m for res in results for m in res["metrics"] if m["step"] > skip]
            ),
            "errors": [res["error"] for res in results if "error" in res],
        }
    ratio = common.ratio(arms["remote"]["step_s_median"], arms["local"]["step_s_median"])
    cpu_ratio = common.ratio(arms["remote"]["cpu_s_median"], arms["local"]["cpu_s_median"])
    remote_metrics = [res["metrics"] for res in runs["remote"] if res["metrics"]]
    bytes_ = traffic(remote_metrics[0], skip, rows, response_width) if remote_metrics else None
    params = parameter_bytes(model_dir)
    print(
        common.markdown_table(
            ["arm", "step s (median)", "per round", "CPU s/step (median)"],
            [
                [a, v["step_s_median"], ", ".join(common.fmt(x) for x in v["step_s_per_round"]), v["cpu_s_median"]]
                for a, v in arms.items()
            ],
        )
    )
    print(f"remote / local: {common.fmt(ratio)} (goal <= {STEP_GOAL}); CPU seconds per step: {common.fmt(cpu_ratio)}")
    for arm, a in arms.items():
        print(
            f"{arm} CPU s/step by process: "
            + ", ".join(f"{k} {common.fmt(v)}" for k, v in a["cpu_s_by_process_median"].items())
        )
    summary = [step_row(arms)]
    if bytes_ is not None:
        measured, over = bytes_["bytes_per_step_median"], bytes_["measured_over_payload"]
        print(
            f"forwarder bytes per step: {common.fmt(measured)} (payload from shapes {common.fmt(bytes_['payload_per_step_median'])}, "
            f"x{common.fmt(over)}); model parameters: {params:,} bytes; sync/bytes max {bytes_['sync_bytes_max']}"
        )
        met = over is not None and over <= PAYLOAD_GOAL and not bytes_["sync_bytes_max"]
        summary.append(
            common.goal_row(
                NAME,
                "forwarder bytes per step (data only, zero weight bytes)",
                measured,
                f"<= {PAYLOAD_GOAL}x tensor payload, 0 weight bytes",
                met,
                f"{measured / 2**20:.2f} MiB/step = {over:.2f}x payload; {measured / params:.2f}x the {params / 2**20:.1f} MiB of "
                f"parameters; sync/bytes = {bytes_['sync_bytes_max']:g}"
                if measured is not None
                else None,
            )
        )
    report = {
        "machine": {**before, "load_avg_1m_after": common.machine()["load_avg_1m"]},
        "model": model_label,
        "sets": sets,
        "steps_per_run": steps,
        "warmup_steps_skipped": skip,
        "rounds": rounds,
        "arms": arms,
        "remote_over_local": ratio,
        "remote_over_local_cpu": cpu_ratio,
        "traffic": bytes_,
        "parameter_bytes": params,
        "summary": summary,
        "runs": {
            arm: [
                {k: v for k, v in res.items() if k != "metrics"}
                | {"step_s": [m["timing_s/step"] for m in res["metrics"]]}
                | {"cpu_s": [m.get("cpu_s/step") for m in res["metrics"]]}
                for res in results
            ]
            for arm, results in runs.items()
        },
    }
    common.write_result(NAME, report, args.quick, args.out)


if __name__ == "__main__":
    main()
