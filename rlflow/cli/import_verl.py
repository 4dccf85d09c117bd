"""``rlflow import-verl CONFIG [OVERRIDES...] [-o FILE]``: a verl GRPO or PPO config as an rlflow pipeline.

A thin shell over ``rlflow.importers``. Design notes: docs/design/cli.md.
"""

from __future__ import annotations

from pathlib import Path

import typer

from rlflow.cli.extras import require_train
from rlflow.errors import CannotWrite
from rlflow.io import why_unwritable

VERL_MODULES = ("verl", "hydra", "omegaconf")


def import_verl(
    config: str = typer.Argument(
        ..., help="A verl config file (ppo_trainer.yaml style), or the name of one verl ships: ppo_trainer."
    ),
    overrides: list[str] | None = typer.Argument(
        None, help="Hydra overrides as verl's scripts pass them: key=value, +key=value, ~key.", show_default=False
    ),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the pipeline here instead of stdout."),
) -> None:
    """Convert a verl GRPO or PPO config (and its Hydra overrides) into an rlflow pipeline."""
    require_train("import-verl", VERL_MODULES)
    from rlflow.importers.verl_config import read_verl_config
    from rlflow.importers.verl_pipeline import convert

    if output is not None and output.is_dir():  # before the conversion's seconds, not after
        raise CannotWrite(f"{output}: is a folder; give -o the path of the pipeline file to write")
    verl_config = read_verl_config(config, overrides or ())
    conversion = convert(verl_config)
    text = conversion.render(str(output) if output is not None else "FILE")
    for line in conversion.listing():
        typer.echo(line, err=True)
    for file in verl_config.read_outside:
        typer.echo(f"note: read {file}, outside the config's folder (hydra.searchpath or a group override)", err=True)
    if output is None:
        typer.echo(text, nl=False)
        return
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
    except OSError as exc:
        raise CannotWrite(why_unwritable(output, exc) + "; give -o a path you can write") from None
    typer.echo(f"wrote {output}; check it with `rlflow validate {output}`", err=True)


def register(app: typer.Typer) -> None:
    app.command("import-verl")(import_verl)
