"""``export_run``: a run's checkpoint as a Hugging Face model directory (``rlflow export``).

The policy (or ``--model critic``) of the latest complete checkpoint (or ``--step N``) in its block's dtype,
written beside DIR and renamed into place. Design notes: docs/design/checkpoints.md.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from rlflow.errors import ExportError, TargetExists
from rlflow.io import read_bytes, why_unwritable
from rlflow.runtime import checkpoints
from rlflow.runtime.run_dir import CHECKPOINTS, RESOLVED
from rlflow.schemas.model_roles import MODEL_ROLES
from rlflow.schemas.safe_yaml import parse_yaml, read_config

DAMAGED = "the checkpoint is damaged: export another step (--step N) or copy it again"
STATE_BYTES = 1 << 20
MODELS = {"policy": "actor", "critic": "critic"}  # what ``--model`` exports: the model role whose part it is


@dataclass(frozen=True)
class Exported:
    """What ``export_run`` wrote: the directory, from which checkpoint and step, in which dtype; a note
    when ``AutoTokenizer`` would not load the tokenizer the model was trained with."""

    out: Path
    checkpoint: Path
    step: int
    dtype: str
    note: str | None = None
    model: str = "policy"


def export_run(run_dir: Path, out: Path, step: int | None = None, model: str = "policy") -> Exported:
    """Write ``model`` (``MODELS``: the policy, or the critic) of the checkpoint of ``step`` (default: the
    latest complete one) of ``run_dir`` to ``out``."""
    from rlflow.backends.local.checkpoint import WEIGHTS, export_pretrained, model_dir

    if model not in MODELS:
        raise ExportError(f"--model {model!r}: not a model a run trains; use one of {', '.join(MODELS)}")
    role = MODELS[model]
    ckpt = find_checkpoint(run_dir, step)
    global_step = _global_step(ckpt)
    spec = _pipeline(run_dir, ckpt)
    if role == "critic" and not spec.uses_critic:
        raise ExportError(_no_critic(run_dir, spec))
    part = ckpt / MODEL_ROLES[role].checkpoint_part
    dtype = _dtype(spec, role)
    if not (model_dir(part) / WEIGHTS).is_file():
        raise ExportError(_no_model(ckpt, part, spec, role))
    _check_weights(model_dir(part) / WEIGHTS)
    _check_target(out)
    tmp = out.with_name(f".{out.name}.tmp-export")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        note = export_pretrained(part, tmp, dtype, role)
        if out.exists():
            out.rmdir()  # checked empty above
        tmp.rename(out)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ExportError(_damaged_or_unwritable(model_dir(part), out, exc)) from None
    except ValueError as exc:  # transformers' word for a config or tokenizer file it cannot use
        shutil.rmtree(tmp, ignore_errors=True)
        raise ExportError(f"{model_dir(part)}: cannot load the model ({_first_line(exc)}); {DAMAGED}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return Exported(out, ckpt, global_step, dtype, note, model)


def _dtype(spec, role: str) -> str:
    """The dtype the model of ``role`` trained in: the block that declares it (``critic.model.dtype``, else
    the policy's ``model.dtype``)."""
    if MODEL_ROLES[role].block == "critic":
        return spec.critic.model.dtype or spec.model.dtype
    return spec.model.dtype


def _no_critic(run_dir: Path, spec) -> str:
    why = (
        "critic.enable is false"
        if spec.critic.enable is False
        else f"algorithm.adv_estimator is {spec.algorithm.adv_estimator}, not gae"
    )
    return (
        f"{run_dir}: this run trained no critic ({why}), so its checkpoints hold none; export its policy "
        "(--model policy, the default), or train one: algorithm.adv_estimator: gae with the compute_values "
        "and update_critic stages"
    )


def find_checkpoint(run_dir: Path, step: int | None) -> Path:
    """The complete checkpoint of ``step`` (default: the latest); ExportError saying what there is otherwise."""
    if not run_dir.is_dir():
        raise ExportError(f"{run_dir}: no such run directory; give a run's folder (runs/<pipeline>/<run id>)")
    folder = run_dir / CHECKPOINTS
    complete = checkpoints.complete_checkpoints(folder)
    steps = [int(p.name.removeprefix("step_")) for p in complete]
    listed = ", ".join(map(str, steps))
    if step is None:
        if not complete:
            raise ExportError(
                f"{run_dir}: no complete checkpoint to export in {folder} "
                "(a run writes them every trainer.save_freq steps)"
            )
        return complete[-1]
    path = checkpoints.step_dir(folder, step)
    if step in steps:
        return path
    if path.exists() or (folder / f"{checkpoints.TMP_PREFIX}{path.name}").exists():
        raise ExportError(
            f"{run_dir}: checkpoint step {step} is incomplete (its run stopped while writing it); "
            + (f"complete ones: {listed}" if steps else "there is no complete one")
        )
    raise ExportError(
        f"{run_dir}: no checkpoint of step {step}; "
        + (f"steps with a checkpoint: {listed} (--step N)" if steps else "the run has no complete checkpoint")
    )


def _pipeline(run_dir: Path, ckpt: Path):
    """The pipeline that wrote ``ckpt``: its own resolved copy, else the run's."""
    from rlflow.schemas.pipeline import Pipeline

    for path in (ckpt / RESOLVED, run_dir / RESOLVED):
        if path.exists():
            text, problems = read_config(path, str(path), RESOLVED)
            data, _, problems = parse_yaml(text, str(path)) if text is not None else (None, None, problems)
            if problems:
                raise ExportError(f"{problems[0]}; {DAMAGED}")
            try:
                return Pipeline.model_validate(data)
            except ValidationError as exc:
                raise ExportError(f"{path}: not a resolved pipeline ({_first_line(exc)}); {DAMAGED}") from None
    raise ExportError(f"{run_dir}: no {RESOLVED} (in the run or its checkpoint), so the model's dtype is unknown")


def _no_model(ckpt: Path, part: Path, spec, role: str) -> str:
    """Why checkpoint ``ckpt`` holds no model directory in ``part`` (the folder of ``role``'s model), named
    after the resource whose engine wrote it."""
    from rlflow.backends.local.checkpoint import model_dir
    from rlflow.plan.compile import compile_plan

    plan = compile_plan(spec)
    writer = plan.first_with_role("checkpoint")
    if MODEL_ROLES[role].checkpoint_part:  # a model of its own: the stages holding it wrote its part
        writer = next((s for s in plan.step if role in s.engine_roles), writer)
    resource = spec.resources.get(writer.resource) if writer is not None else None
    missing = model_dir(part).relative_to(ckpt)
    if resource is not None and resource.type == "remote":
        return (
            f"{ckpt}: holds no Hugging Face model ({missing}/): it was written by resource {writer.resource!r}, "
            f"remote backend {resource.backend!r}, whose checkpoint is its own (its format, or its machine's disk); "
            "export the model with that backend's tools"
            + (
                ", or copy the checkpoint here from the machine the backend runs on"
                if resource.backend == "reference"
                else ""
            )
        )
    return f"{ckpt}: holds no Hugging Face model ({missing}/model.safetensors is missing); the checkpoint is damaged"


def _global_step(ckpt: Path) -> int:
    """The step ``ckpt``'s trainer_state.json records; ExportError naming the file when it is damaged."""
    file = ckpt / checkpoints.STATE_FILE
    try:
        state = json.loads(read_bytes(file, STATE_BYTES, checkpoints.STATE_FILE))
        return int(state["global_step"])
    except OSError as exc:
        raise ExportError(f"{file}: cannot read: {exc.strerror or exc}; {DAMAGED}") from None
    except (ValueError, TypeError, KeyError) as exc:
        raise ExportError(
            f"{file}: not a trainer state: JSON with a global_step ({_first_line(exc)}); {DAMAGED}"
        ) from None


def _check_weights(file: Path) -> None:
    """safetensors checks the header and that the file holds every byte it declares (a truncated copy does not)."""
    from safetensors import safe_open

    try:
        with safe_open(str(file), framework="pt", device="cpu") as weights:
            weights.keys()
    except Exception as exc:  # noqa: BLE001 - SafetensorError, OSError: each a damaged file, worded the same
        raise ExportError(f"{file}: not a complete safetensors file ({_first_line(exc)}); {DAMAGED}") from None


def _damaged_or_unwritable(source: Path, out: Path, exc: OSError) -> str:
    """An ``OSError`` of the export as one line: reading the checkpoint's model ``source``, or writing ``out``."""
    if exc.filename is None:  # transformers raises its own OSError, naming the file in its message
        return f"{source}: cannot load the model ({_first_line(exc)}); {DAMAGED}"
    if Path(exc.filename).resolve().is_relative_to(source.resolve()):
        return f"{exc.filename}: cannot read: {exc.strerror or exc}; {DAMAGED}"
    return why_unwritable(out, exc) + "; give -o a folder you can write"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _check_target(out: Path) -> None:
    if out.exists() and not out.is_dir():
        raise TargetExists(f"{out}: exists and is not a folder; give a new or empty folder to export to")
    if out.is_dir() and any(out.iterdir()):
        raise TargetExists(f"{out}: is not empty; give a new or empty folder to export to (nothing is overwritten)")
