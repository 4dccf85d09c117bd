"""``rlflow plot RUN_DIR -o curve.png``: the learning curve of a run, read from its ``metrics.jsonl``.

Two panels over training steps: the training reward (``critic/score/mean`` and
``reward/acc``) and every validation metric (keys starting ``val-core/``, verl's
``val-core/<data_source>/<var>/mean@N``). Validation runs only every ``test_freq`` steps, so
each series is drawn from the steps that report it, with markers. A last line that does not
end in a newline is skipped: the run may still be writing it. matplotlib is imported inside
the command (with the file-only Agg backend), keeping ``rlflow --help`` fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from rlflow.cli.extras import PLOT_MODULES, require_train
from rlflow.errors import DataError

REWARD_KEYS = ("critic/score/mean", "reward/acc")
VAL_PREFIX = "val-core/"

Series = dict[str, list[tuple[int, float]]]


def _metrics_file(run: Path) -> Path:
    path = run / "metrics.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise DataError(
            f"{path}: no metrics file; give a run directory (runs/<pipeline>/<run id>) holding metrics.jsonl"
        )
    return path


def read_series(path: Path) -> tuple[Series, Series]:
    """(reward series, validation series), each metric name -> [(step, value)] in file order."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if not text.endswith("\n"):
        lines = lines[:-1]  # a record still being written
    reward: Series = {}
    val: Series = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DataError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise DataError(f"{path}:{number}: each line must be a JSON object with an integer 'step'")
        for key, value in record.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                target = reward if key in REWARD_KEYS else val if key.startswith(VAL_PREFIX) else None
                if target is not None:
                    target.setdefault(key, []).append((record["step"], float(value)))
    if not reward and not val:
        raise DataError(
            f"{path}: no reward or validation metrics to plot (looked for {', '.join(REWARD_KEYS)} and {VAL_PREFIX}*)"
        )
    return reward, val


def draw(reward: Series, val: Series, output: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for ax, series, label in ((axes[0], reward, "training reward"), (axes[1], val, "validation")):
        for name, points in series.items():
            steps, values = zip(*points, strict=True)
            ax.plot(steps, values, marker="o" if len(points) < 50 else None, markersize=3, label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no metrics", ha="center", va="center", transform=ax.transAxes)
    axes[1].set_xlabel("step")
    fig.suptitle(title)
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=120)
    plt.close(fig)


def register(app: typer.Typer) -> None:
    @app.command("plot")
    def plot(
        run_dir: Path = typer.Argument(..., help="Run directory holding metrics.jsonl (or the file itself)."),
        output: Path = typer.Option(Path("curve.png"), "-o", "--output", help="Image to write (.png, .svg, .pdf)."),
    ) -> None:
        """Draw a run's training reward and validation accuracy over steps."""
        require_train("plot", PLOT_MODULES)
        path = _metrics_file(run_dir)
        reward, val = read_series(path)
        draw(reward, val, output, title=str(path.parent))
        typer.echo(f"wrote {output}")
