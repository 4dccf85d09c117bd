"""What ``rlflow validate`` does, without the CLI framework: check files, print the report.

Kept apart from the typer command, so a plain ``rlflow validate`` never imports typer.
Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rlflow.cli.positional_overrides import print_override_error

MAX_PRINTED = 100  # problems printed per file; --json has every one


def check_files(
    pipelines: Sequence[Path],
    sets: Sequence[str],
    *,
    check_paths: bool = True,
    drops: Sequence[str] = (),
    resolved: bool = False,
    verl: bool = False,
) -> list[dict]:
    """One result per file (``ok``, counts or diagnostics); an unreadable rlflow.yaml is one failed result.

    ``check_paths``: the data files, databases folder and model directory must exist, and the data files
    must load as ``rlflow run`` loads them (``rlflow.data.load_problems``; no tokenizer). ``drops``:
    stages to remove by name. ``resolved``: a valid file's result holds the fully resolved
    pipeline (``resolved``, YAML text), what ``rlflow run`` would save as pipeline.resolved.yaml.
    ``verl``: a valid file's result also holds ``verl_order``, its plan compared with verl's step.
    """
    # On its first model pydantic scans every installed package for pydantic plugins; that
    # scan costs more than the whole validation, and validation needs no plugin.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    # Reading Parquet imports pyarrow, and pyarrow numpy, whose OpenBLAS starts a thread per core that
    # spins a while: a sixth of such a validation on 2 cores, and validation does no linear algebra.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    with _collector_paused():
        return _check_all(pipelines, sets, check_paths, drops, resolved, verl)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off: validating builds many objects that live to the end (modules,
    models) and leaves little cyclic garbage, so collecting meanwhile costs a tenth of the time for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _check_all(
    pipelines: Sequence[Path], sets: Sequence[str], check_paths: bool, drops: Sequence[str], resolved: bool, verl: bool
) -> list[dict]:
    """``check_files``' work, once its settings are in place."""
    from rlflow.check import load_pipeline
    from rlflow.errors import ConfigError
    from rlflow.schemas.project import load_project_config

    try:
        project = load_project_config()
    except ConfigError as exc:
        return [_failure("rlflow.yaml", exc)]
    results = []
    for path in pipelines:
        try:
            loaded = load_pipeline(path, sets, project, check_paths=check_paths, drops=drops)
        except ConfigError as exc:
            results.append(_failure(str(path), exc))
        except Exception as exc:  # noqa: BLE001 - one broken file must not hide the others' results
            if os.environ.get("RLFLOW_DEBUG"):
                raise
            results.append(
                {
                    "file": str(path),
                    "ok": False,
                    "diagnostics": [],
                    "error": f"internal error: {type(exc).__name__}: {exc} (RLFLOW_DEBUG=1 shows where)",
                }
            )
        else:
            spec = loaded.spec
            unloadable = _data_problems(loaded) if check_paths else []
            if unloadable:
                results.append({"file": str(path), "ok": False, "diagnostics": [], "text": unloadable})
                continue
            idle = _declared_not_run(spec)
            result = {
                "file": str(path),
                "ok": True,
                "stages": len(spec.stages) - len(idle),
                **({"not_run": idle} if idle else {}),
                "resources": len(spec.resources),
                "diagnostics": [],
                "warnings": [d.to_dict() for d in loaded.warnings],
                "warning_text": [warning_line(d) for d in loaded.warnings],
            }
            if resolved:
                result["resolved"] = loaded.resolved_yaml()
            if verl:
                result["verl_order"] = _verl_order(spec)
            results.append(result)
    return results


def _declared_not_run(spec) -> list[str]:
    """The declared stages the compiled step leaves out under the pipeline's settings (``old_log_prob`` under
    ``rollout_correction.bypass_mode``, ``save_checkpoint`` with ``save_freq: -1``)."""
    from rlflow.plan.compile import compile_plan

    runs = set(compile_plan(spec).stage_names())
    return [stage.name for stage in spec.stages if stage.name not in runs]


def _data_problems(loaded) -> list[str]:
    """What ``rlflow run`` would refuse in the data files (``rlflow.data.load_problems``), one line each."""
    from rlflow.data.load_problems import data_problems

    return [line for problem in data_problems(loaded.spec, loaded.project.root) for line in problem.splitlines()]


def _verl_order(spec) -> dict:
    from rlflow.check.verl_order import compare_with_verl
    from rlflow.plan.compile import compile_plan

    report = compare_with_verl(spec, compile_plan(spec))
    return {
        "source": report.source,
        "differences": list(report.differences),
        "skipped": report.skipped,
        "summary": report.summary(),
        "warnings": report.warnings(),
    }


def report(results: list[dict], as_json: bool) -> int:
    """Print the results (JSON on stdout, or one line per problem on stderr); returns the exit code:
    0 all valid, 2 some file is invalid, 1 an internal error.

    Results holding a ``resolved`` pipeline print it on stdout (one YAML document per file, so
    the output pipes into a file or a YAML tool) and their ``ok`` line on stderr."""
    if as_json:
        payload = [{k: v for k, v in r.items() if k not in ("text", "warning_text")} for r in results]
        print(json.dumps({"ok": all(r["ok"] for r in results), "files": payload}, indent=2))
    else:
        _print_lines(results)
    if all(r["ok"] for r in results):
        return 0
    return 2 if all("error" not in r for r in results) else 1


def fast_path(argv: Sequence[str]) -> int | None:
    """Run ``validate`` for a plain command line (files, ``--set``/``-s``, ``--drop``, ``--json``,
    ``--print``, ``--no-check-paths``, ``--verl``) and return its exit code; None for anything else
    (``--help``, an unknown option, no file), which the full CLI then handles and explains. A
    Hydra-style ``key=value`` in place of a file is answered with the ``--set`` to write (exit 2)."""
    if not argv or argv[0] != "validate" or any(a in ("-h", "--help") for a in argv[1:]):
        return None
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("pipelines", nargs="*", type=Path)
    parser.add_argument("--set", "-s", dest="sets", action="append", default=[])
    parser.add_argument("--drop", dest="drops", action="append", default=[])
    parser.add_argument("--json", dest="as_json", action="store_true")
    parser.add_argument("--print", dest="resolved", action="store_true")
    parser.add_argument("--check-paths", dest="check_paths", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--verl", action="store_true")
    try:
        args, unknown = parser.parse_known_args(list(argv[1:]))
    except argparse.ArgumentError:
        return None
    if unknown or not args.pipelines:
        return None
    if print_override_error(args.pipelines):
        return 2
    results = check_files(
        args.pipelines,
        args.sets,
        check_paths=args.check_paths,
        drops=args.drops,
        resolved=args.resolved,
        verl=args.verl,
    )
    return report(results, args.as_json)


def warning_line(diagnostic) -> str:
    """``file:line:col: warning: path: message (fix)``: a diagnostic that leaves the pipeline valid."""
    where = f"{diagnostic.file}:{diagnostic.line}:{diagnostic.col}: " if diagnostic.file else ""
    return f"{where}warning: {str(diagnostic).removeprefix(where)}"


def _failure(file: str, exc) -> dict:
    return {
        "file": file,
        "ok": False,
        "diagnostics": [d.to_dict() for d in exc.diagnostics],
        "text": [str(d) for d in exc.diagnostics],
    }


def _print_lines(results: list[dict]) -> None:
    problems = 0
    printed = [r for r in results if "resolved" in r]
    for r in printed:
        if len(printed) > 1:
            print(f"--- # {r['file']}")
        print(r["resolved"], end="")
    for r in results:
        if r["ok"]:
            out = sys.stderr if "resolved" in r else sys.stdout  # --print keeps stdout for the YAML
            idle = f"; declared but not run under these settings: {', '.join(r['not_run'])}" if "not_run" in r else ""
            print(f"{r['file']}: ok ({r['stages']} stages, {r['resources']} resources{idle})", file=out)
            for line in r["warning_text"]:
                print(line, file=sys.stderr)
            order = r.get("verl_order")
            if order and order["warnings"]:
                for line in order["warnings"]:
                    print(f"{r['file']}: warning: {line}", file=sys.stderr)
            elif order:
                print(f"{r['file']}: {order['summary']}", file=out)
        elif "error" in r:
            problems += 1
            print(f"{r['file']}: {r['error']}", file=sys.stderr)
        else:
            problems += len(r["text"])
            for line in r["text"][:MAX_PRINTED]:
                print(line, file=sys.stderr)
            if len(r["text"]) > MAX_PRINTED:
                left = len(r["text"]) - MAX_PRINTED
                print(f"{r['file']}: ... and {left} more problems (every one: --json)", file=sys.stderr)
    if problems:
        bad = sum(not r["ok"] for r in results)
        print(f"{problems} problem{'s' * (problems != 1)} in {bad} file{'s' * (bad != 1)}", file=sys.stderr)
