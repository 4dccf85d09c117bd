"""``rlflow backend``: run the reference backend's server by hand, list the registered backends.

``rlflow backend serve CONFIG`` serves in the foreground and prints its handle; CONFIG is a pipeline file (with
``--resource``) or a JSON main_config. Design notes: docs/design/cli.md.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import typer

from rlflow.cli.extras import require_train
from rlflow.errors import BackendError, ConfigError, Diagnostic
from rlflow.io import read_bytes

backend_app = typer.Typer(
    help="Remote backends: serve the reference backend, list what is registered.", no_args_is_help=True
)


@backend_app.command("serve")
def serve(
    config: Path = typer.Argument(..., help="A pipeline file, or a JSON main_config."),
    resource: str | None = typer.Option(None, "--resource", "-r", help="The pipeline's remote resource to serve."),
    set_: list[str] | None = typer.Option(
        None, "--set", "-s", help="name=value (template var) or dotted.path=value (field)."
    ),
    host: str | None = typer.Option(None, help="Bind address (default: the resource's `host`, else 127.0.0.1)."),
    port: int | None = typer.Option(None, help="Port (default: the resource's `port`, else a free one)."),
    device: str | None = typer.Option(None, help="cpu, cuda or auto (default: the resource's `device`)."),
    num_threads: int | None = typer.Option(None, "--num-threads", help="torch CPU threads in the server."),
    handle_file: Path | None = typer.Option(None, "--handle-file", help="Also write the handle here (mode 0600)."),
) -> None:
    """Serve the reference backend in the foreground; prints the handle a run joins with."""
    require_train("backend serve")
    from rlflow.backends.remote.config import ReferenceConfig, ServeConfig

    main_config = _main_config(config, resource, set_ or ())
    try:
        settings = ReferenceConfig.model_validate(main_config["backend_config"])
    except Exception as exc:
        raise BackendError(f"resources.{main_config['resource']}.config: {exc}") from None
    overrides = {
        k: v for k, v in dict(host=host, port=port, device=device, num_threads=num_threads).items() if v is not None
    }
    serve_config = ServeConfig(
        main_config=main_config, backend="reference", **{**settings.server_settings(), **overrides}
    )
    target = handle_file or (
        _resolve(settings.handle_file, main_config["project_root"]) if settings.handle_file else None
    )
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    typer.echo(f"building the engine for resource {main_config['resource']!r}...", err=True)
    from rlflow.backends.remote.server import serve as run_server

    run_server(serve_config, handle_file=target, print_handle=True)


@backend_app.command("list")
def list_() -> None:
    """The registered remote backends (built-in and plugins), whether they take a single forwarder, and
    whether they take rollout weights from a local actor and run multi-turn rollouts."""
    from rlflow.backends.remote.registry import get, list_backends

    for name in list_backends():
        cls = get(name)
        single = "single forwarder" if cls.single_forwarder else "any number of forwarders"
        weights = ", takes rollout weights" if cls.accepts_rollout_weights else ""
        turns = ", runs multi-turn rollouts" if cls.runs_agent_loop else ""
        typer.echo(f"{name}\t{cls.__module__}.{cls.__qualname__}\t({single}{weights}{turns})")


def _main_config(config: Path, resource: str | None, sets: tuple[str, ...]) -> dict:
    if config.suffix == ".json":
        if resource or sets:
            raise BackendError(
                "--resource and --set apply to pipeline files; a JSON main_config already names its resource"
            )
        return _json_main_config(config)
    from rlflow.check import load_pipeline
    from rlflow.registry import import_plugins
    from rlflow.schemas.project import load_project_config

    project = load_project_config()
    import_plugins(project.plugins, project.root)
    # the data stays with the driver: a server on another machine need not hold it
    loaded = load_pipeline(config, sets, project=project, check_paths=False)
    name = _pick_resource(loaded.spec, resource, str(config))
    return {
        "pipeline": loaded.spec.model_dump(by_alias=True, mode="json"),
        "resource": name,
        "backend_config": dict(loaded.spec.resources[name].config),
        "project_root": str(project.root),
        "run_dir": None,  # served by hand, for whichever runs join it
    }


def _json_main_config(path: Path) -> dict:
    from rlflow.backends.remote.base import check_main_config

    try:
        data = json.loads(read_bytes(path, 16 << 20, "main_config"))
    except (OSError, ValueError) as exc:
        raise BackendError(f"{path}: cannot read a JSON main_config: {exc}") from None
    check_main_config(data, "reference")
    return data


def _pick_resource(spec, resource: str | None, file: str) -> str:
    served = sorted(n for n, r in spec.resources.items() if r.type == "remote" and r.backend == "reference")
    if resource is None:
        if len(served) != 1:
            found = ", ".join(served) or "none"
            raise ConfigError(
                [
                    Diagnostic(
                        file,
                        1,
                        1,
                        "resources",
                        "pick the resource to serve with --resource",
                        f"remote resources on backend 'reference': {found}",
                    )
                ]
            )
        return served[0]
    res = spec.resources.get(resource)
    if res is None or res.type != "remote":
        raise ConfigError(
            [
                Diagnostic(
                    file,
                    1,
                    1,
                    f"resources.{resource}",
                    "no remote resource of that name",
                    f"reference ones: {', '.join(served) or 'none'}",
                )
            ]
        )
    if res.backend != "reference":
        raise ConfigError(
            [
                Diagnostic(
                    file,
                    1,
                    1,
                    f"resources.{resource}.backend",
                    f"is {res.backend!r}; `rlflow backend serve` runs the 'reference' backend",
                    "start other backends with their own tooling",
                )
            ]
        )
    return resource


def _resolve(path: str, root: str) -> Path:
    p = Path(os.path.expanduser(path))
    return p if p.is_absolute() else Path(root) / p


def register(app: typer.Typer) -> None:
    app.add_typer(backend_app, name="backend")
