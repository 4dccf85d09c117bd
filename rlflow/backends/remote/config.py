"""Settings of the reference backend: the resource's ``config:`` block and the server's own file.

``ReferenceConfig`` (strict, checked by validation) and ``ServeConfig`` (the server's JSON file). Pure pydantic:
no torch. Design notes: docs/design/remote_reference.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_MAX_MESSAGE_BYTES = 1 << 30


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Strict):
    """Knobs shared by a started server and the client that talks to it."""

    host: str = Field("127.0.0.1", description="Address the server binds; 0.0.0.0 exposes it to the network.")
    port: int = Field(0, ge=0, le=65535, description="0 picks a free port.")
    advertise_host: str | None = Field(
        None,
        description="Address the handle gives clients; default: `host`, or this machine's name when binding 0.0.0.0.",
    )
    max_message_bytes: int = Field(DEFAULT_MAX_MESSAGE_BYTES, gt=0, description="Cap on one message, either way.")
    remember_calls: int = Field(64, ge=1, description="Replies of this many update calls are kept for retries.")
    handshake_timeout_s: float = Field(10.0, gt=0, description="A new connection's whole hello must arrive in this.")
    max_connections: int = Field(
        64, ge=1, description="Authenticated connections served at once; more are refused with a message."
    )
    max_handshakes: int = Field(
        16,
        ge=1,
        description="Connections not yet authenticated held at once; a newer one cuts the oldest (strangers "
        "never take an authenticated client's place).",
    )
    idle_timeout_s: float | None = Field(
        3600.0, gt=0, description="Close an authenticated connection silent this long (clients reconnect); None: never."
    )
    device: Literal["cpu", "cuda", "auto"] = Field("auto", description="Where the server's engine runs.")
    num_threads: int | None = Field(
        None,
        gt=0,
        description="torch CPU threads in the server; set it when the CPU is shared (oversubscribed threads crawl).",
    )
    engine: str | None = Field(
        None, description="`module:factory` returning an rlflow Engine from main_config; default: the local engine."
    )


class ReferenceConfig(ServerSettings):
    """``resources.<name>.config`` for ``backend: reference``."""

    handle: dict[str, Any] | None = Field(
        None, description="Join a running server (`rlflow backend serve` prints this)."
    )
    handle_file: str | None = Field(None, description="Join a running server whose handle is in this JSON file.")
    startup_timeout_s: float = Field(300.0, gt=0, description="How long a started server may take to come up.")
    retries: int = Field(3, ge=0, description="Reconnect-and-retry attempts after a lost connection.")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay; doubles each attempt.")
    connect_timeout_s: float = Field(10.0, gt=0)
    call_timeout_s: float | None = Field(
        None, gt=0, description="Give up on a silent call; None waits (the stage watchdog still applies)."
    )
    log_dir: str | None = Field(
        None,
        description="Folder where a started server writes server.log; by default <run_dir>/backends/<resource>.log "
        "in a run, a temporary folder otherwise.",
    )

    @model_validator(mode="after")
    def _one_way_to_join(self) -> ReferenceConfig:
        if self.handle is not None and self.handle_file is not None:
            raise ValueError("give either `handle` or `handle_file`, not both")
        return self

    def server_settings(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in ServerSettings.model_fields}


class ServeConfig(ServerSettings):
    """The file ``python -m rlflow.backends.remote.server --config FILE`` reads."""

    main_config: dict[str, Any]
    backend: str = "reference"
    token: str | None = Field(None, description="Shared secret of the handle; a random one when omitted.")
