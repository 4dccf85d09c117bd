"""``rlflow graph``: the step as a picture, or a finished run as a timeline.

A thin shell over the loader, ``compile_plan`` and a renderer; nothing heavy is imported.
Design notes: docs/design/cli.md.
"""

from __future__ import annotations

from pathlib import Path

import typer

from rlflow.cli.extras import PLOT_MODULES, require_train
from rlflow.cli.positional_overrides import EXTRA_ARGUMENTS, reject_extra_arguments
from rlflow.errors import CannotWrite, ConfigError, Diagnostic, RlflowError
from rlflow.io import why_unwritable, write_output

FORMATS = ("text", "mermaid", "dot", "json")
DEFAULT_STEP_PICTURE = Path("step.svg")
DEFAULT_TIMELINE_PICTURE = Path("timeline.svg")


def graph(
    ctx: typer.Context,
    pipeline: Path | None = typer.Argument(None, help="Pipeline file (YAML, a Jinja2 template)."),
    set_: list[str] | None = typer.Option(
        None, "--set", "-s", help="name=value (template var) or dotted.path=value (field)."
    ),
    drops: list[str] | None = typer.Option(None, "--drop", help="Remove the stage of this name; repeatable."),
    fmt: str = typer.Option("text", "--format", "-f", help="text, mermaid, dot or json (timeline: text)."),
    render: bool = typer.Option(False, "--render", help="Draw a picture (SVG or PNG by the -o suffix)."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write here instead of stdout (default picture: step.svg, timeline.svg)."
    ),
    timeline: Path | None = typer.Option(
        None, "--timeline", help="A run directory: chart its trace.jsonl instead of a pipeline."
    ),
    steps: str | None = typer.Option(
        None, "--steps", help="Timeline: only steps FIRST-LAST (or one step N); 0 is start-up and init."
    ),
) -> None:
    """Show a pipeline's compiled step (stages in order, resources, data), or a run's timeline."""
    reject_extra_arguments(ctx, [pipeline] if pipeline is not None else [])
    if fmt not in FORMATS:
        raise typer.BadParameter(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}", param_hint="--format")
    if (pipeline is None) == (timeline is None):
        raise typer.BadParameter("give either a PIPELINE file or --timeline RUN_DIR (one of them)")
    if steps is not None and timeline is None:
        raise typer.BadParameter("--steps chooses the steps of a --timeline", param_hint="--steps")
    if timeline is not None:
        _timeline(timeline, fmt, render, output, _step_range(steps))
    elif pipeline.is_dir():
        raise ConfigError([_folder_hint(pipeline)])
    else:
        _pipeline_graph(pipeline, tuple(set_ or ()), tuple(drops or ()), fmt, render, output)


def _pipeline_graph(
    pipeline: Path, sets: tuple[str, ...], drops: tuple[str, ...], fmt: str, render: bool, output: Path | None
) -> None:
    from rlflow.check import load_pipeline
    from rlflow.plan.compile import compile_plan

    spec = load_pipeline(pipeline, sets, drops=drops).spec
    plan = compile_plan(spec)
    if render:
        _draw(plan, spec, output or DEFAULT_STEP_PICTURE)
        return
    _emit(_renderer(fmt)(plan) if fmt == "json" else _renderer(fmt)(plan, spec), output)


def _folder_hint(folder: Path) -> Diagnostic:
    """A folder given as the pipeline: a run directory is charted with ``--timeline``, and the error says so."""
    from rlflow.plan.timeline import TRACE_FILE

    if (folder / TRACE_FILE).is_file():
        fix = f"to chart its trace: rlflow graph --timeline {folder}"
        return Diagnostic("", 0, 0, "", f"{folder} is a run directory, not a pipeline file", fix)
    return Diagnostic("", 0, 0, "", f"{folder} is a folder, not a pipeline file", "give a pipeline YAML file")


def _renderer(fmt: str):
    if fmt == "mermaid":
        from rlflow.plan.render_mermaid import render_mermaid as renderer
    elif fmt == "dot":
        from rlflow.plan.render_dot import render_dot as renderer
    elif fmt == "json":
        from rlflow.plan.render_json import render_json as renderer
    else:
        from rlflow.plan.render_text import render_text as renderer
    return renderer


def _draw(plan, spec, output: Path) -> None:
    from rlflow.plan.graphviz import GraphvizMissing, output_format, render_graphviz
    from rlflow.plan.render_dot import render_dot

    output_format(output)  # a bad suffix is an error before anything is written
    source = render_dot(plan, spec)
    try:
        render_graphviz(source, output)
    except GraphvizMissing as exc:
        dot_file = output.with_suffix(".dot")
        dot_file.parent.mkdir(parents=True, exist_ok=True)
        dot_file.write_text(source)
        hint = f"wrote the graph source to {dot_file} (draw it later with `dot -Tsvg {dot_file}`)"
        raise RlflowError(f"{exc}; {hint}") from None
    typer.echo(f"wrote {output}")


def _step_range(text: str | None) -> tuple[int, int] | None:
    """``3-7`` -> (3, 7); ``5`` -> (5, 5)."""
    if text is None:
        return None
    first, _, last = text.partition("-")
    if not first.strip().isdigit() or not (last or first).strip().isdigit() or int(last or first) < int(first):
        raise typer.BadParameter(
            f"{text!r} is not a step range; write FIRST-LAST (e.g. 0-3) or one step", param_hint="--steps"
        )
    return int(first), int(last or first)


def _timeline(run_dir: Path, fmt: str, render: bool, output: Path | None, steps: tuple[int, int] | None) -> None:
    from rlflow.plan import timeline as tl

    if fmt != "text":
        raise typer.BadParameter("a timeline prints as text (or draws with --render)", param_hint="--format")
    path = tl.trace_path(run_dir)
    spans = tl.read_trace(path, steps)  # only the chosen steps are held
    if render:
        require_train("graph --timeline --render", PLOT_MODULES)
        from rlflow.cli.plot import run_title

        title = f"{run_title(path)} · timeline" + (f" of steps {steps[0]}-{steps[1]}" if steps else "")
        target = tl.render_timeline(spans, output or DEFAULT_TIMELINE_PICTURE, title, tl.read_startup(run_dir), steps)
        typer.echo(f"wrote {target}")
        return
    shown = tl.in_steps(spans, steps)
    resources = tl.render_resources(shown)
    _emit(tl.render_summary(tl.summarize(shown)) + (f"\n{resources}" if resources else ""), output)


def _emit(text: str, output: Path | None) -> None:
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_output(output, text.encode())
    except OSError as exc:  # a full disk, /dev/full: one line, and never "wrote"
        raise CannotWrite(why_unwritable(output, exc) + "; give -o a path you can write") from None
    typer.echo(f"wrote {output}")


def register(app: typer.Typer) -> None:
    app.command("graph", context_settings=EXTRA_ARGUMENTS)(graph)
