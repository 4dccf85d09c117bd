"""``rlflow plot RUN_DIR -o curve.png``: what a user looks at first, read from a run's ``metrics.jsonl``.

One panel per metric over training steps, bounded whatever the file. Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import difflib
import io
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import typer

from rlflow.cli.extras import PLOT_MODULES, require_train
from rlflow.errors import CannotWrite, DataError
from rlflow.io import read_json_lines, why_unwritable, write_output

Series = dict[str, list[tuple[int, float]]]
MAX_LINE_BYTES = 1 << 20  # one step's metrics: a few kB in verl's runs
MAX_SERIES = 1000  # metric names; verl logs about 150 per step
MAX_POINTS = 500  # per series, before pairs are averaged: a panel is about 800 pixels wide
VAL_CORE = re.compile(r"^val-core/(?P<source>.+)/(?P<var>[^/]+)/(?P<stat>mean@\d+)$")


@dataclass(frozen=True)
class Panel:
    """One axis: the metrics it draws (exact names, or a pattern), how it is titled and smoothed."""

    name: str
    title: str
    ylabel: str
    keys: tuple[str, ...] = ()
    pattern: str = ""
    smooth: bool = True
    needs: str = ""  # a metric without which the panel says nothing (it is left out)

    def series(self, metrics: Series) -> Series:
        if self.needs and self.needs not in metrics:
            return {}
        chosen = {k: metrics[k] for k in self.keys if k in metrics}
        if self.pattern:
            chosen.update({k: v for k, v in sorted(metrics.items()) if re.match(self.pattern, k)})
        if chosen.get("reward/acc") is not None and chosen["reward/acc"] == chosen.get("critic/score/mean"):
            del chosen["reward/acc"]
        return chosen


PANELS = (
    Panel("reward", "training reward", "mean score", keys=("critic/score/mean", "reward/acc")),
    Panel("val", "validation", "", pattern=VAL_CORE.pattern, smooth=False),  # y label: the variables
    Panel("length", "response length", "tokens", keys=("response_length/mean",)),
    Panel("kl", "KL to the reference", "kl_loss", keys=("actor/kl_loss",)),
    Panel("entropy", "entropy", "nats", keys=("actor/entropy",)),
    # PPO's critic (adv_estimator gae): its loss, and how much of the returns' variance its values explain
    Panel("value_loss", "critic value loss", "vf_loss", keys=("critic/vf_loss",), needs="critic/vf_loss"),
    Panel(
        "explained_var",
        "explained variance of the returns",
        "vf_explained_var",
        keys=("critic/vf_explained_var",),
        needs="critic/vf_loss",
    ),
    # a single-turn run logs num_turns/* too (2, as verl): only a multi-turn rollout's turns are worth a panel
    Panel(
        "turns",
        "turns per trajectory",
        "turns",
        keys=("num_turns/mean", "tool_call_counts/mean"),
        needs="tool_call_counts/mean",
    ),
    Panel("errors", "error rates", "share of samples", pattern=r"^reward/\w+_rate$|^tool/(.+/)?error_ratio$"),
)
PANEL_NAMES = tuple(p.name for p in PANELS)


def metrics_file(run: Path) -> Path:
    path = run / "metrics.jsonl" if run.is_dir() else run
    if not path.is_file():
        raise DataError(
            f"{path}: no metrics file; give a run directory (runs/<pipeline>/<run id>) holding metrics.jsonl"
        )
    return path


def read_series(path: Path) -> Series:
    """Every numeric metric: name -> [(step, value)] in file order, at most ``2 * MAX_POINTS`` points each.

    The file is read a line at a time, so its size does not matter; a longer series is averaged down as it is
    read (``Downsampled``), so neither does the run's length."""
    series: dict[str, Downsampled] = {}
    for number, record in _records(path):
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise DataError(f"{path}:{number}: each line must be a JSON object with an integer 'step'")
        for key, value in record.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                points = series.get(key)
                if points is None:
                    if len(series) == MAX_SERIES:
                        raise DataError(
                            f"{path}:{number}: more than {MAX_SERIES} metric names, the most `rlflow plot` reads "
                            "(is this a metrics.jsonl written by `rlflow run`?)"
                        )
                    points = series[key] = Downsampled()
                points.add(record["step"], float(value))
    return {key: points.finish() for key, points in series.items()}


def _records(path: Path) -> Iterator[tuple[int, object]]:
    return read_json_lines(path, MAX_LINE_BYTES, DataError)


class Downsampled:
    """One metric's points in bounded memory: once ``2 * MAX_POINTS`` are held, neighbours are averaged in
    pairs and each later point stands for twice as many records, so every point is the mean of an equal
    run of records (the last may hold fewer) at the step of its first."""

    def __init__(self) -> None:
        self.points: list[tuple[int, float]] = []
        self.stride = 1
        self.pending: tuple[int, float, int] | None = None  # first step, sum, records, of the point being filled

    def add(self, step: int, value: float) -> None:
        first, total, count = self.pending or (step, 0.0, 0)
        total, count = total + value, count + 1
        if count < self.stride:
            self.pending = (first, total, count)
            return
        self.pending = None
        self.points.append((first, total / count))
        if len(self.points) >= 2 * MAX_POINTS:
            pairs = zip(self.points[::2], self.points[1::2], strict=True)
            self.points = [(a_step, (a + b) / 2) for (a_step, a), (_, b) in pairs]
            self.stride *= 2

    def finish(self) -> list[tuple[int, float]]:
        if self.pending is None:
            return self.points
        first, total, count = self.pending
        return [*self.points, (first, total / count)]


def choose_panels(metrics: Series, names: list[str] | None) -> list[tuple[Panel, Series]]:
    """The panels to draw with their data: the named ones (a panel name or a metric's full name), or
    every default panel; panels with no data are left out."""
    by_name = {p.name: p for p in PANELS}
    panels = []
    for name in names or PANEL_NAMES:
        if name in by_name:
            panels.append(by_name[name])
        elif name in metrics:
            panels.append(Panel(name, name, name.rsplit("/", 1)[-1], keys=(name,)))
        else:
            close = difflib.get_close_matches(name, [*PANEL_NAMES, *metrics], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise typer.BadParameter(
                f"no panel or metric {name!r} ({hint}panels: {', '.join(PANEL_NAMES)}; or a metric of metrics.jsonl)",
                param_hint="--metrics",
            )
    drawn = [(panel, data) for panel in panels if (data := panel.series(metrics))]
    if not drawn:
        raise DataError(f"nothing to plot: no data for {', '.join(p.name for p in panels)}")
    return drawn


def ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's smoothing: an exponential moving average, bias-corrected so it starts on the data."""
    out, last, norm = [], 0.0, 0.0
    for value in values:
        last = weight * last + (1 - weight) * value
        norm = weight * norm + (1 - weight)
        out.append(last / norm if norm else value)
    return out


def run_title(path: Path) -> str:
    """``<pipeline> · <run id>``: the name from the run's resolved pipeline, the id from its folder."""
    from rlflow.schemas.safe_yaml import parse_yaml, read_config

    resolved = path.parent / "pipeline.resolved.yaml"
    name = None
    if resolved.is_file():
        text, _ = read_config(resolved, str(resolved))  # bounded: the run directory may come from anyone
        doc = parse_yaml(text, str(resolved))[0] if text is not None else None
        name = doc.get("name") if isinstance(doc, dict) else None
    return f"{name} · run {path.parent.name}" if name else f"run {path.parent.name}"


def draw(panels: list[tuple[Panel, Series]], output: Path, title: str, smooth: float = 0.85) -> None:
    import matplotlib
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    cols = 1 if len(panels) == 1 else 2
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(6 * cols, 0.7 + 2.9 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    steps = [s for _, data in panels for points in data.values() for s, _ in points]
    for ax, (panel, data) in zip(axes, panels, strict=False):
        for i, (key, points) in enumerate(data.items()):
            _plot_series(ax, panel, key, points, f"C{i}", smooth)
        ax.set_title(_panel_title(panel, data), loc="left", fontsize=10)
        ax.set_ylabel(panel.ylabel or _val_ylabel(data), fontsize=9)
        ax.set_xlim(min(steps), max(steps) + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.25, linewidth=0.6)
        ax.spines[["top", "right"]].set_visible(False)
        if len(data) > 1:
            ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=min(len(data), 3), fontsize=7,
                      frameon=False, borderaxespad=0.3, handlelength=1.5)  # fmt: skip
    for ax in axes[len(panels) :]:
        ax.remove()
    for ax in axes[max(0, len(panels) - cols) : len(panels)]:
        ax.set_xlabel("step", fontsize=9)
    fig.suptitle(title, fontsize=12, fontweight="bold")
    picture = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(picture, format=picture_format(output), dpi=130)
    write_picture(output, picture.getvalue())


def picture_format(output: Path) -> str:
    """matplotlib's format for ``output``'s suffix (PNG when it has none); an error naming the known ones."""
    from matplotlib.backend_bases import FigureCanvasBase

    known = FigureCanvasBase.get_supported_filetypes()
    fmt = output.suffix.lower().lstrip(".") or "png"
    if fmt not in known:
        raise CannotWrite(
            f"cannot draw {str(output)!r}: matplotlib writes no {output.suffix!r} files; "
            f"give -o a name ending in .png, .svg or .pdf (or {', '.join('.' + k for k in sorted(known))})"
        )
    return fmt


def write_picture(output: Path, data: bytes) -> None:
    """Write a drawn picture whole (``write_output``); any failure is one ``CannotWrite`` line naming the path."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_output(output, data)
    except OSError as exc:
        raise CannotWrite(why_unwritable(output, exc) + "; give -o a path you can write") from None


def _plot_series(ax, panel: Panel, key: str, points: list[tuple[int, float]], colour: str, smooth: float) -> None:
    steps, values = zip(*points, strict=True)
    label = _series_label(panel, key)
    if not panel.smooth:
        ax.margins(y=0.12)  # room for the first and last values
        ax.plot(steps, values, marker="o", markersize=3.5, linewidth=1.4, color=colour, label=label)
        ends = [(0, (7, -3), "left", "top"), (-1, (0, 7), "right", "bottom")] if len(points) > 1 else []
        for end, offset, ha, va in ends:  # where it started and where it ended, clear of the line
            ax.annotate(f"{values[end]:.2f}", (steps[end], values[end]), xytext=offset, textcoords="offset points",
                        ha=ha, va=va, fontsize=8, color=colour)  # fmt: skip
        return
    if smooth > 0 and len(points) >= 5:
        ax.plot(steps, values, color=colour, alpha=0.25, linewidth=0.8)
        values = ema(list(values), smooth)
    ax.plot(steps, values, color=colour, linewidth=1.6, label=label)


def _series_label(panel: Panel, key: str) -> str:
    match = VAL_CORE.match(key)
    if panel.name == "val" and match:
        return f"{match['source']}/{match['var']}"
    return key


def _val_ylabel(data: Series) -> str:
    """``acc (mean@1)``: the validation variables and statistics drawn."""
    found = [m.group("var", "stat") for m in map(VAL_CORE.match, data) if m]
    names = ", ".join(dict.fromkeys(var for var, _ in found))
    return f"{names} ({', '.join(dict.fromkeys(stat for _, stat in found))})"


def _panel_title(panel: Panel, data: Series) -> str:
    if len(data) == 1 and panel.title != next(iter(data)):
        return f"{panel.title}  ({_series_label(panel, next(iter(data)))})"
    return panel.title


def register(app: typer.Typer) -> None:
    @app.command("plot")
    def plot(
        run_dir: Path = typer.Argument(..., help="Run directory holding metrics.jsonl (or the file itself)."),
        output: Path = typer.Option(Path("curve.png"), "-o", "--output", help="Image to write (.png, .svg, .pdf)."),
        metrics: str | None = typer.Option(
            None,
            "--metrics",
            "-m",
            help=f"Comma-separated panels ({', '.join(PANEL_NAMES)}) or full metric names, e.g. reward,actor/grad_norm.",
        ),
        smooth: float = typer.Option(
            0.85, "--smooth", min=0.0, max=0.99, help="EMA weight for training series; 0: none."
        ),
    ) -> None:
        """Draw a run's learning curves: reward, validation per data source, length, KL, entropy, the critic's
        value loss (PPO), errors."""
        require_train("plot", PLOT_MODULES)
        picture_format(output)  # a suffix matplotlib cannot write is refused before the file is read
        path = metrics_file(run_dir)
        names = [n.strip() for n in metrics.split(",") if n.strip()] if metrics else None
        panels = choose_panels(read_series(path), names)
        draw(panels, output, run_title(path), smooth)
        typer.echo(f"wrote {output} ({', '.join(p.name for p, _ in panels)})")
