"""What every benchmark script shares: paths, the benchmark model, running ``rlflow run``, memory
sampling, medians and ratios, goals, tables and the JSON result files.

Design decisions:
- Each benchmark is a module of the ``benchmarks`` package, run from the repository root as
  ``python -m benchmarks.bench_x``, and imports this module as ``from benchmarks import common``;
  nothing here imports torch, ray or transformers at module level, so a script's ``--help`` and
  the summary writer stay instant.
- The machine is shared and noisy: every comparison runs its arms side by side in one
  invocation, interleaved (``rotations``), and reports medians and ratios of medians. The load
  average before and after is written beside every figure so a reader can judge the noise.
- One model for every arm: the warm start ``rlflow/assets/models/tiny-sql-warm`` when it exists,
  else the built-in tiny model saved once with ``save_pretrained`` under ``runs/bench-model`` (so
  rlflow, the plain loop, HF generate, TRL and vLLM all load the very same weights and tokenizer).
- Results go to ``benchmarks/results/<name>.json``; ``--quick`` runs go to ``<name>_quick.json``
  so that a smoke run never overwrites a real figure. Every result carries a ``summary`` list
  of rows (figure, measured, goal, met) that ``run_all.py`` turns into the README's results table
  and docs/benchmarks.md, and the ``commit`` the figures were measured on (``commit_id``).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"
RESULTS = BENCH / "results"
WARM_START = ROOT / "rlflow" / "assets" / "models" / "tiny-sql-warm"
BUILTIN_DIR = ROOT / "runs" / "bench-model" / "tiny-qwen2"
TRL_PYTHON = ROOT / ".venv-trl" / "bin" / "python"
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

# The sizes every step benchmark uses (the issue's: 16 prompts x 8 samples x 48 tokens), one
# optimizer step per generation batch (mini-batch = the whole batch), micro-batches of 8 samples.
SIZES = {
    "train_batch_size": 16,
    "n": 8,
    "max_response_length": 48,
    "ppo_mini_batch_size": 16,
    "ppo_micro_batch_size_per_gpu": 8,
}
# --set overrides that put a pipeline at SIZES, without validation or checkpoints inside the timed steps.
STEP_SETS = (
    f"trainer.train_batch_size={SIZES['train_batch_size']}",
    f"algorithm.n={SIZES['n']}",
    f"data.max_response_length={SIZES['max_response_length']}",
    f"trainer.ppo_mini_batch_size={SIZES['ppo_mini_batch_size']}",
    f"trainer.ppo_micro_batch_size_per_gpu={SIZES['ppo_micro_batch_size_per_gpu']}",
    "trainer.test_freq=-1",
    "trainer.val_before_train=false",
    "trainer.save_freq=-1",
)
# --set overrides for --quick: tiny sizes that prove a benchmark's path in seconds.
QUICK_SETS = (
    "trainer.train_batch_size=2",
    "algorithm.n=2",
    "data.max_response_length=8",
    "trainer.ppo_mini_batch_size=2",
    "trainer.ppo_micro_batch_size_per_gpu=2",
)


# ---- environment ------------------------------------------------------------------------------
def bench_env(threads: int = 1) -> dict[str, str]:
    """The environment of every benchmark subprocess: quiet Ray, fixed thread counts.

    ``RAY_ADDRESS=local`` (unless the caller set an address): without an address ``ray.init``
    joins whatever cluster ``ray start`` last registered on the machine, and on a shared
    machine that is someone else's; a benchmark must time its own embedded Ray.
    """
    env = dict(os.environ)
    env.update(
        RAY_USAGE_STATS_ENABLED="0",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        PYTHONUNBUFFERED="1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    env.setdefault("RAY_ADDRESS", "local")
    return env


def machine() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def rlflow_script() -> list[str]:
    """The installed ``rlflow`` command beside this interpreter (what users run), else ``python -m``."""
    script = shutil.which("rlflow", path=str(Path(sys.executable).parent))
    return [script] if script else [sys.executable, "-m", "rlflow.cli.main"]


def bench_model_dir() -> tuple[Path, str]:
    """(directory, label) of the model every arm loads; saves the built-in one on first use."""
    if (WARM_START / "config.json").is_file():
        return WARM_START, "models/tiny-sql-warm (warm start)"
    if not (BUILTIN_DIR / "config.json").is_file():
        save_builtin(BUILTIN_DIR)
    return BUILTIN_DIR, "builtin:tiny-qwen2 (saved with save_pretrained)"


def save_builtin(directory: Path, seed: int = 1) -> None:
    """The built-in tiny model and its tokenizer as a Hugging Face directory (written atomically)."""
    from rlflow.backends.local.models import load_model
    from rlflow.data.tokenizer import load_tokenizer
    from rlflow.schemas.pipeline import ModelSpec

    spec = ModelSpec()
    tokenizer = load_tokenizer(spec)
    save_model_dir(load_model(spec, tokenizer, seed=seed), tokenizer, directory)


def save_model_dir(model, tokenizer, directory: Path) -> None:
    """``model`` and ``tokenizer`` as a Hugging Face directory, written beside it and renamed into place."""
    tmp = directory.with_name(directory.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(directory, ignore_errors=True)
    tmp.rename(directory)


# ---- statistics -------------------------------------------------------------------------------
def median(values: Iterable[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b in (None, 0) else a / b


def rotations(arms: Sequence[str], rounds: int) -> list[list[str]]:
    """The arms' order in each round, rotated so that no arm always runs first (or last)."""
    return [list(arms[r % len(arms) :]) + list(arms[: r % len(arms)]) for r in range(rounds)]


def goal_row(
    benchmark: str,
    figure: str,
    measured: float | None,
    goal: str,
    met: bool | None,
    shown: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One row of the results table: ``met`` is None when the figure could not be measured."""
    return {
        "benchmark": benchmark,
        "figure": figure,
        "measured": measured,
        "measured_text": shown if shown is not None else fmt(measured),
        "goal": goal,
        "met": met,
        "note": note,
    }


def round_ratio_row(
    benchmark: str,
    figure: str,
    numerators: Sequence[float | None],
    denominators: Sequence[float | None],
    goal: str,
    holds: Callable[[float], bool],
    detail: str = "",
    note: str = "",
) -> dict[str, Any]:
    """A ratio goal judged round by round: the ratio of each round's own figures (arms measured side by
    side), the median of those as the headline, their spread beside it, and ``met`` only when the
    goal holds in every round. Never a ratio of medians pooled over rounds that disagree."""
    per_round = [ratio(a, b) for a, b in zip(numerators, denominators)]
    valid = [r for r in per_round if r is not None]
    if not valid:
        return goal_row(benchmark, figure, None, f"{goal} in every round", None, "n/a", note)
    middle = median(valid)
    spread = f"rounds {min(valid):.2f}-{max(valid):.2f}" if len(valid) > 1 else "1 round"
    return goal_row(
        benchmark,
        f"{figure} (median of per-round ratios)",
        middle,
        f"{goal} in every round",
        all(holds(r) for r in valid),
        f"{middle:.2f}x ({spread}{'; ' + detail if detail else ''})",
        note,
    )


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in headers]] + [[fmt(c) if not isinstance(c, str) else c for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, cells[1:])])


# What cannot change a measurement: results, Markdown, docs and the test suite (no benchmark imports it).
NOT_CODE = (":(exclude)benchmarks/results", ":(exclude)*.md", ":(exclude)docs", ":(exclude)tests")


def commit_id() -> str:
    """The short commit of the checkout, with ``-dirty`` when code (anything but results,
    Markdown, docs and tests) has uncommitted changes; ``unknown`` outside a git checkout."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".", *NOT_CODE)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("-dirty" if dirty else "")


def write_result(name: str, report: dict[str, Any], quick: bool, out: Path | None = None) -> Path:
    path = out or RESULTS / (f"{name}_quick.json" if quick else f"{name}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "benchmark": name,
        "quick": quick,
        "finished": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": commit_id(),
        **report,
    }
    path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    return path


# ---- rlflow run as a user runs it -------------------------------------------------------------
def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_rlflow(
    pipeline: str, sets: Sequence[str], run_dir: Path, *, log: Path, timeout: float, sample_memory: bool = False
) -> dict[str, Any]:
    """``rlflow run`` in a subprocess: metrics (each with ``cpu_s/step`` and ``cpu_s_by_process/step``),
    trace, wall time, peak memory. The raw CPU samples are spent on the per-step figures, not returned."""
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [*rlflow_script(), "run", pipeline, "--run-dir", str(run_dir)]
    for s in sets:
        cmd += ["--set", s]
    result = run_process(cmd, log=log, timeout=timeout, sample_memory=sample_memory)
    metrics, trace = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(run_dir / "trace.jsonl")
    samples, by_process = result.pop("cpu_samples"), result.pop("cpu_samples_by_process")  # spent on the steps below
    windows = trace_windows(trace)
    if 1 in windows:  # what the whole tree spent before the first step began: start-up's CPU cost
        result["cpu_s_to_first_step"] = cpu_between(samples, samples[0][0], windows[1][0])
        result["cpu_s_by_process_to_first_step"] = cpu_by_process_between(by_process, by_process[0][0], windows[1][0])
    for m in metrics:
        if m.get("step") in windows:
            m["cpu_s/step"] = cpu_between(samples, *windows[m["step"]])
            m["cpu_s_by_process/step"] = cpu_by_process_between(by_process, *windows[m["step"]])
    result.update(command=" ".join(cmd[1:] if cmd[0].endswith("rlflow") else cmd), metrics=metrics, trace=trace)
    if result["exit_code"] != 0:
        result["error"] = tail(log)
    return result


def run_process(
    cmd: Sequence[str], *, log: Path, timeout: float, sample_memory: bool = False, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``cmd`` (output to ``log``): wall-clock start (epoch seconds), duration, exit code, the
    tree's CPU samples (``cpu_samples``) and, with ``sample_memory``, its peak memory."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        start = time.time()
        proc = subprocess.Popen(
            list(cmd), cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=env or bench_env(), start_new_session=True
        )
        with TreeSampler(proc.pid, interval=0.2 if sample_memory else 0.25, memory=sample_memory) as sampler:
            try:
                code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                code = -9
    return {"exit_code": code, "start": start, "wall_s": time.time() - start, "log": str(log), **sampler.report()}


def _kill_group(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def step_times(metrics: list[dict[str, Any]], skip: int = 2, key: str = "timing_s/step") -> list[float]:
    """``key`` of every step after the first ``skip`` (warm-up: allocator, caches, lazy imports)."""
    return [m[key] for m in metrics if m.get("step", 0) > skip and key in m]


# ---- CPU and memory of a process tree ---------------------------------------------------------
class TreeSampler:
    """Samples a process and all its descendants every ``interval`` seconds: CPU time, and memory.

    ``rlflow run`` starts Ray's GCS, raylet and workers (and a remote backend's server) as its
    descendants, so the tree covers the whole run.

    CPU: the tree's cumulative user + system seconds, kept per process group: what a process used
    since the previous sample goes to the group it is in now, so a process that exits keeps what it
    used and one that changes its name (Ray's idle worker becoming an actor, or a name read while Ray
    rewrites it) leaves its past in the old group instead of moving it. On a shared machine a step's
    CPU seconds move far less with the neighbours' load than its wall time does, so they back up the
    wall-time ratios.

    Memory (``memory=True``; about a millisecond per process per sample): RSS counts shared pages
    (torch's libraries, Ray's object store) once per process, so its sum is an upper bound of the
    footprint; PSS (each shared page split between the processes mapping it) is summed beside
    it, and that sum is the footprint itself. Both peaks are kept.
    """

    def __init__(self, pid: int, interval: float = 0.2, memory: bool = False) -> None:
        import psutil

        self.root = psutil.Process(pid)
        self.interval = interval
        self.memory = memory
        self.cpu: list[tuple[float, float]] = []  # (wall clock, cumulative CPU seconds of the tree)
        self.cpu_by_name: list[tuple[float, dict[str, float]]] = []  # the same, per process group
        self._cpu_by_pid: dict[int, float] = {}  # pid -> its cumulative CPU seconds at the latest sample
        self._cpu_by_group: dict[str, float] = {}  # group -> CPU seconds its processes used while in it
        self.peak = 0
        self.peak_pss = 0
        self.peak_processes: dict[str, int] = {}  # process name -> RSS at the RSS peak
        self.peak_pss_groups: dict[str, int] = {}  # process group -> PSS at the PSS peak
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> TreeSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def cpu_s(self) -> float:
        """CPU seconds the tree has used up to the latest sample."""
        return self.cpu[-1][1] if self.cpu else 0.0

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.Error:
                break
            rss, pss, names, pss_groups = 0, 0, {}, {}
            for p in procs:
                try:
                    times, group = p.cpu_times(), process_group(p)
                    used = times.user + times.system
                    since = used - self._cpu_by_pid.get(p.pid, 0.0)
                    self._cpu_by_group[group] = self._cpu_by_group.get(group, 0.0) + since
                    self._cpu_by_pid[p.pid] = used
                    if self.memory:
                        info = p.memory_full_info()
                        rss, pss = rss + info.rss, pss + info.pss
                        names[p.name()] = names.get(p.name(), 0) + info.rss
                        pss_groups[group] = pss_groups.get(group, 0) + info.pss
                except psutil.Error:
                    continue
            now, groups = time.time(), dict(self._cpu_by_group)
            self.cpu.append((now, sum(groups.values())))
            self.cpu_by_name.append((now, groups))
            self.samples += 1
            if pss > self.peak_pss:
                self.peak_pss, self.peak_pss_groups = pss, pss_groups
            if rss > self.peak:
                self.peak, self.peak_processes = rss, names
            self._stop.wait(self.interval)

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cpu_samples": self.cpu,
            "cpu_samples_by_process": self.cpu_by_name,
            "samples": self.samples,
        }
        if self.memory:
            top = sorted(self.peak_processes.items(), key=lambda kv: -kv[1])[:8]
            pss_top = sorted(self.peak_pss_groups.items(), key=lambda kv: -kv[1])
            out.update(
                peak_rss_bytes=self.peak,
                peak_rss_gib=round(self.peak / 2**30, 3),
                peak_pss_gib=round(self.peak_pss / 2**30, 3),
                peak_rss_by_process_mib={k: round(v / 2**20, 1) for k, v in top},
                peak_pss_by_group_mib={k: round(v / 2**20, 1) for k, v in pss_top},
            )
        return out


def process_group(p) -> str:
    """A readable group for a process of the tree: Ray names its workers ``ray::<Class>.<method>``."""
    name = p.name()
    if name.startswith("ray::"):
        return name.split(".")[0]  # ray::StageWorker.run_stage -> ray::StageWorker
    if name.startswith("python") or name == "rlflow":
        cmd = " ".join(p.cmdline()[1:3])
        for marker, group in (
            ("default_worker.py", "ray idle worker"),
            ("rlflow.backends.remote.server", "backend server"),
            ("dashboard/agent.py", "ray dashboard agent"),
            ("dashboard/dashboard.py", "ray dashboard"),
            ("runtime_env", "ray runtime env agent"),
            ("log_monitor", "ray log monitor"),
            ("autoscaler/_private/monitor.py", "ray autoscaler monitor"),
        ):
            if marker in cmd:
                return group
        return "driver" if name == "rlflow" else name
    return name


def cpu_by_process_between(
    samples: Sequence[tuple[float, dict[str, float]]], start: float, end: float
) -> dict[str, float]:
    """CPU seconds each process group used between two wall-clock moments."""
    names = {n for _, groups in samples for n in groups}
    return {n: cpu_between([(t, g.get(n, 0.0)) for t, g in samples], start, end) for n in sorted(names)}


def cpu_by_process_median(records: Sequence[dict[str, Any]]) -> dict[str, float | None]:
    """Median CPU seconds per step of each process group over ``records`` (each with ``cpu_s_by_process/step``)."""
    names = {n for r in records for n in r.get("cpu_s_by_process/step", {})}
    return {n: median(r.get("cpu_s_by_process/step", {}).get(n) for r in records) for n in sorted(names)}


def cpu_between(samples: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    """CPU seconds the tree used between two wall-clock moments (linear between samples)."""
    if not samples or start < samples[0][0] or end > samples[-1][0]:
        return None

    def at(t: float) -> float:
        for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return samples[-1][1]

    return at(end) - at(start)


def busy_shares(trace: list[dict], first_step: int) -> dict[str, float]:
    """Each resource's busy time (its calls' intervals merged) over the wall time of steps >= ``first_step``."""
    timed = [r for r in trace if r["step"] >= first_step and r.get("attempt", 0) == 0]
    if not timed:
        return {}
    start, end = min(r["start"] for r in timed), max(r["end"] for r in timed)
    shares = {}
    for resource in sorted({r["resource"] for r in timed}):
        spans = sorted((max(r["start"], start), min(r["end"], end)) for r in timed if r["resource"] == resource)
        busy, (lo, hi) = 0.0, spans[0]
        for a, b in spans[1:]:
            if a > hi:
                busy, lo = busy + hi - lo, a
            hi = max(hi, b)
        shares[resource] = round((busy + hi - lo) / (end - start), 3)
    return shares


def trace_windows(trace: list[dict[str, Any]]) -> dict[int, tuple[float, float]]:
    """Step -> (first stage start, last stage end) from trace.jsonl records."""
    windows: dict[int, tuple[float, float]] = {}
    for r in trace:
        lo, hi = windows.get(r["step"], (r["start"], r["end"]))
        windows[r["step"]] = (min(lo, r["start"]), max(hi, r["end"]))
    return windows


def common_args(parser, *, rounds: int | None = None) -> None:
    """--quick, --out and (for interleaved benchmarks) --rounds."""
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes: proves the path in seconds; writes <name>_quick.json"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="JSON output (default benchmarks/results/<name>[_quick].json)"
    )
    if rounds is not None:
        parser.add_argument(
            "--rounds", type=int, default=None, help=f"interleaved rounds (default {rounds}; --quick: 1)"
        )
