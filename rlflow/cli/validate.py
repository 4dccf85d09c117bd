"""``rlflow validate PIPELINE...``: every problem of every file at once, in a fraction of a second.

Exit 0 when every file is valid, 2 when any is not. Problems print one per line as
``file:line:col: path: problem (fix)`` on stderr; ``--json`` prints one JSON document on
stdout instead. The command imports only the pure layers (pydantic, PyYAML, Jinja2) and
does so inside the function, so ``rlflow --help`` stays instant too; it must never pull in
torch, Ray, verl or transformers (a test runs it in a subprocess and inspects sys.modules).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import List, Optional

import typer


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)


def validate(
    pipelines: List[Path] = typer.Argument(..., help="Pipeline files to check.", show_default=False),
    set_: Optional[List[str]] = typer.Option(
        None, "--set", "-s", help="name=value (template variable) or dotted.path=value (field override); repeatable."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
) -> None:
    """Check pipeline files: YAML, templates, schema and the rules of a GRPO step."""
    # On its first model pydantic scans every installed package for pydantic plugins; that
    # scan costs more than the whole validation, and validation needs no plugin.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from rlflow.errors import ConfigError
    from rlflow.schemas.loader import load_pipeline
    from rlflow.schemas.project import load_project_config

    results = []
    try:
        project = load_project_config()
    except ConfigError as exc:
        results.append(_failure("rlflow.yaml", exc))
        project = None
    if project is not None:
        for path in pipelines:
            try:
                loaded = load_pipeline(path, set_ or (), project)
            except ConfigError as exc:
                results.append(_failure(str(path), exc))
            except Exception as exc:  # noqa: BLE001 - one broken file must not hide the others' results
                if os.environ.get("RLFLOW_DEBUG"):
                    raise
                results.append({"file": str(path), "ok": False, "diagnostics": [],
                                "error": f"internal error: {type(exc).__name__}: {exc} (RLFLOW_DEBUG=1 shows where)"})
            else:
                spec = loaded.spec
                results.append({"file": str(path), "ok": True, "stages": len(spec.stages),
                                "resources": len(spec.resources), "diagnostics": []})
    _print(results, as_json)
    if not all(r["ok"] for r in results):
        raise typer.Exit(2 if all("error" not in r for r in results) else 1)


def _failure(file: str, exc) -> dict:
    return {"file": file, "ok": False, "diagnostics": [d.to_dict() for d in exc.diagnostics],
            "text": [str(d) for d in exc.diagnostics]}


def _print(results: list[dict], as_json: bool) -> None:
    if as_json:
        payload = [{k: v for k, v in r.items() if k != "text"} for r in results]
        typer.echo(json.dumps({"ok": all(r["ok"] for r in results), "files": payload}, indent=2))
        return
    problems = 0
    for r in results:
        if r["ok"]:
            typer.echo(f"{r['file']}: ok ({r['stages']} stages, {r['resources']} resources)")
        elif "error" in r:
            problems += 1
            typer.echo(f"{r['file']}: {r['error']}", err=True)
        else:
            problems += len(r["text"])
            for line in r["text"]:
                typer.echo(line, err=True)
    if problems:
        bad = sum(not r["ok"] for r in results)
        typer.echo(f"{problems} problem{'s' * (problems != 1)} in {bad} file{'s' * (bad != 1)}", err=True)
