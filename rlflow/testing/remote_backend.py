"""Conformance kit for RemoteBackend plugins: point it at a registered backend and run it.

Subclass ``RemoteBackendConformance`` (pytest) or call ``check_backend``; the checks drive the backend exactly
as a run does. Design notes: docs/design/remote_conformance.md.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
import torch

from rlflow.backends.remote import RemoteBackend, connect_backend, create_backend, destroy_backend, get
from rlflow.batch import Batch

REQUIRED_ACTOR_METRICS = ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "actor/lr")
RESPONSE_LENGTH = 8


def tiny_main_config(
    backend: str,
    project_root: str | Path,
    *,
    backend_config: dict | None = None,
    resource: str = "arctic",
    model: dict[str, Any] | None = None,
    run_dir: str | Path | None = None,
) -> dict[str, Any]:
    """A main_config as the runtime builds it, for a tiny GRPO pipeline bound to ``backend``.

    ``model`` is the pipeline's ``model:`` section (``path``, ``tokenizer``, ``dtype``, ...; a
    relative path resolves against ``project_root``); by default the built-in tiny model. The
    prompts the checks send are token ids 3-199, so any vocabulary of 200 tokens or more works.
    ``run_dir`` is the run directory a backend may write its logs into (None: outside a run).
    """
    from rlflow.schemas.pipeline import Pipeline

    on = {"name": "x", "on": resource}
    pipeline = Pipeline.model_validate(
        {
            "name": "conformance",
            "model": model or {"path": "builtin:tiny-qwen2"},
            "data": {"train": "train.json", "max_prompt_length": 16, "max_response_length": RESPONSE_LENGTH},
            "algorithm": {"n": 2, "use_kl_loss": True, "kl_loss_coef": 0.001},
            "trainer": {"train_batch_size": 2, "ppo_mini_batch_size": 2, "optim": {"lr": 1e-3}, "seed": 1},
            "resources": {
                resource: {"type": "remote", "backend": backend, "forwarders": 1, "config": backend_config or {}},
                "reward_pool": {"type": "cpu"},
            },
            "stages": [
                {**on, "name": "generate", "uses": "generate"},
                {"name": "reward", "uses": "text2sql_reward", "on": "reward_pool"},
                {**on, "name": "old_log_prob", "uses": "old_log_prob"},
                {**on, "name": "ref_log_prob", "uses": "ref_log_prob"},
                {"name": "advantage", "uses": "grpo_advantage", "on": "driver"},
                {**on, "name": "update_actor", "uses": "update_actor"},
                {**on, "name": "sync_weights", "uses": "sync_weights"},
            ],
        }
    )
    return {
        "pipeline": pipeline.model_dump(by_alias=True, mode="json"),
        "resource": resource,
        "backend_config": dict(backend_config or {}),
        "project_root": str(project_root),
        "run_dir": None if run_dir is None else str(run_dir),
    }


def prompt_batch(rows: int = 4, width: int = 6, seed: int = 0) -> Batch:
    """Left-padded prompts of small token ids (valid in any vocabulary), two rows per uid."""
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, 200, (rows, width), generator=g)
    mask = torch.ones(rows, width, dtype=torch.long)
    for row in range(0, rows, 2):
        mask[row, : 1 + row % (width - 1)] = 0
    prompts = prompts.masked_fill(mask == 0, 0)
    return Batch({"prompts": prompts, "prompt_mask": mask}, {"uid": [f"u{i // 2}" for i in range(rows)]})


GEN = {
    "max_response_length": RESPONSE_LENGTH,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "do_sample": True,
    "seed": 7,
}


def _descendants() -> set[int]:
    """Live processes below this one (a backend's server, its workers)."""
    import psutil

    alive = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive.add(proc.pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def _finite(t: torch.Tensor, mask: torch.Tensor) -> bool:
    return bool(torch.isfinite(t[mask.bool()]).all())


# -- the checks (each raises AssertionError naming the broken contract) ----------------------------


def check_class(name: str, backend: RemoteBackend) -> None:
    cls = get(name)
    assert type(backend) is cls, (
        f"create_backend({name!r}) returned {type(backend).__name__}, registered is {cls.__name__}"
    )
    assert isinstance(cls.single_forwarder, bool), "single_forwarder must be a bool class attribute"
    assert backend.requires_single_forwarder() == cls.single_forwarder, (
        "requires_single_forwarder() disagrees with the class attribute single_forwarder, which validation reads"
    )


def check_handle(backend: RemoteBackend) -> dict[str, Any]:
    handle = backend.reconnect_handle()
    assert isinstance(handle, dict), f"reconnect_handle() must return a dict, got {type(handle).__name__}"
    assert json.loads(json.dumps(handle)) == handle, "reconnect_handle() must be JSON-able (it crosses processes)"
    return handle


def check_reconnect(name: str, main_config: dict, backend: RemoteBackend) -> RemoteBackend:
    handle = check_handle(backend)
    before = _descendants()
    joined = connect_backend(name, main_config, handle)
    started = _descendants() - before
    assert not started, f"from_config(handle=...) must start nothing; it started process(es) {sorted(started)}"
    assert joined is not backend, "from_config(handle=...) must return a new instance (one per forwarder)"
    assert joined.reconnect_handle() == handle, "a reconnected backend must report the handle it joined with"
    return joined


def check_init_sync(engine: RemoteBackend) -> None:
    metrics = engine.update_weights(0)
    assert isinstance(metrics, dict) and all(isinstance(v, (int, float)) for v in metrics.values()), (
        f"update_weights must return a dict of numbers, got {metrics!r}"
    )
    assert engine.set_global_steps(0) is None, "set_global_steps returns None"


def check_generate(engine: RemoteBackend) -> Batch:
    batch = prompt_batch()
    out = engine.generate(batch, GEN)
    rows = len(batch)
    assert isinstance(out, Batch), f"generate must return a Batch, got {type(out).__name__}"
    responses, mask = out["responses"], out["response_mask"]
    assert tuple(responses.shape) == (rows, RESPONSE_LENGTH), (
        f"responses must be [{rows}, {RESPONSE_LENGTH}], got {tuple(responses.shape)}"
    )
    assert not responses.is_floating_point(), f"responses must hold token ids, got {responses.dtype}"
    assert tuple(mask.shape) == tuple(responses.shape), "response_mask must have the shape of responses"
    assert set(mask.unique().tolist()) <= {0, 1}, "response_mask must hold 0 and 1 only"
    assert bool((mask[:, 1:] <= mask[:, :-1]).all()), "responses must be right-padded: no 1 after a 0 in response_mask"
    texts = out["response_text"]
    assert len(texts) == rows and all(isinstance(t, str) for t in texts), "response_text must be one str per row"
    assert all(isinstance(v, (int, float)) for v in out.metrics.values()), "batch metrics must be numbers"
    greedy = dict(GEN, do_sample=False)
    assert torch.equal(engine.generate(batch, greedy)["responses"], engine.generate(batch, greedy)["responses"]), (
        "greedy generation (do_sample=False) must be deterministic"
    )
    return batch.update(out)


def check_log_probs(engine: RemoteBackend, batch: Batch) -> Batch:
    rows, mask = len(batch), batch["response_mask"]
    out = engine.compute_log_prob(batch, {})
    for key in ("old_log_probs", "entropys"):
        assert tuple(out[key].shape) == (rows, RESPONSE_LENGTH), f"{key} must be [{rows}, {RESPONSE_LENGTH}]"
        assert out[key].is_floating_point() and _finite(out[key], mask), f"{key} must be finite floats under the mask"
    assert bool((out["old_log_probs"][mask.bool()] <= 1e-4).all()), "log-probs must be <= 0"
    assert bool((out["entropys"][mask.bool()] >= -1e-4).all()), "entropies must be >= 0"
    again = engine.compute_log_prob(batch, {})["old_log_probs"]
    assert torch.allclose(again, out["old_log_probs"], atol=1e-5), "compute_log_prob must not change the policy"
    ref = engine.compute_ref_log_prob(batch, {})["ref_log_prob"]
    assert tuple(ref.shape) == (rows, RESPONSE_LENGTH) and _finite(ref, mask), "ref_log_prob must be finite [rows, R]"
    return batch.update(out).update(Batch({"ref_log_prob": ref}))


def check_update_actor(engine: RemoteBackend, batch: Batch) -> dict[str, float]:
    batch = batch.update(Batch({"advantages": _advantages(batch)}))
    before = batch["old_log_probs"]
    metrics = engine.update_actor(batch, {"global_steps": 1})
    missing = [k for k in REQUIRED_ACTOR_METRICS if k not in metrics]
    assert not missing, f"update_actor must return verl's actor/* metrics; missing {missing}"
    assert all(math.isfinite(float(metrics[k])) for k in REQUIRED_ACTOR_METRICS), f"non-finite actor metrics {metrics}"
    after = engine.compute_log_prob(batch, {})["old_log_probs"]
    assert not torch.allclose(after, before, atol=1e-6), "update_actor must change the policy (log-probs did not move)"
    return metrics


def _advantages(batch: Batch) -> torch.Tensor:
    signs = torch.tensor([1.0 if i % 2 == 0 else -1.0 for i in range(len(batch))]).unsqueeze(-1)
    return signs * batch["response_mask"].float()


def check_sync(engine: RemoteBackend, global_steps: int) -> None:
    metrics = engine.update_weights(global_steps)
    assert isinstance(metrics, dict), "update_weights must return a dict"
    assert engine.set_global_steps(global_steps) is None
    out = engine.generate(prompt_batch(), GEN)
    assert tuple(out["responses"].shape) == (4, RESPONSE_LENGTH), "generate must work after a weight sync"
    version = out.metrics.get("rollout/policy_version")
    assert version is None or version == global_steps, (
        f"rollout/policy_version must be the global_steps last given to set_global_steps ({global_steps}), "
        f"got {version}"
    )


def check_checkpoint(engine: RemoteBackend, batch: Batch, directory: Path) -> None:
    """Save into an existing empty folder, which is then renamed with a file added beside the backend's
    (as the runtime does), and load from the new name: a backend must not remember where it saved."""
    writing, final = Path(directory) / ".tmp-step_2", Path(directory) / "step_2"
    writing.mkdir(parents=True)
    saved = engine.save_checkpoint(str(writing), 2)
    assert isinstance(saved, dict), "save_checkpoint must return a dict"
    (writing / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    writing.rename(final)
    at_save = engine.compute_log_prob(batch, {})["old_log_probs"]
    batch = batch.update(Batch({"old_log_probs": at_save, "advantages": _advantages(batch)}))
    engine.update_actor(batch, {"global_steps": 3})
    moved = engine.compute_log_prob(batch, {})["old_log_probs"]
    assert not torch.allclose(moved, at_save, atol=1e-6), "update_actor after a save must move the policy"
    loaded = engine.load_checkpoint(str(final))
    assert isinstance(loaded, dict), "load_checkpoint must return a dict"
    restored = engine.compute_log_prob(batch, {})["old_log_probs"]
    assert torch.allclose(restored, at_save, atol=1e-5), "load_checkpoint must restore the policy saved"


ASYNC_TIMEOUT_S = 300.0  # a call of the async case still running after this is a hang


def _in_thread(fn, *args: Any) -> tuple[threading.Thread, list]:
    """Run ``fn`` on a thread; the list receives its result, or the exception it raised."""
    out: list = []

    def run() -> None:
        try:
            out.append(fn(*args))
        except BaseException as exc:  # re-raised by _joined in the checking thread
            out.append(exc)

    thread = threading.Thread(target=run, name="rlflow-conformance-async", daemon=True)
    thread.start()
    return thread, out


def _joined(thread: threading.Thread, out: list, what: str) -> Any:
    thread.join(ASYNC_TIMEOUT_S)
    assert not thread.is_alive(), f"{what} on another connection did not finish within {ASYNC_TIMEOUT_S:g} s"
    if isinstance(out[0], BaseException):
        raise AssertionError(f"{what} on another connection failed: {type(out[0]).__name__}: {out[0]}") from out[0]
    return out[0]


def check_generate_beside_update(engine: RemoteBackend, other: RemoteBackend, batch: Batch) -> None:
    """``generate`` is accepted while ``update_actor`` runs on another connection (another forwarder)."""
    batch = batch.update(Batch({"advantages": _advantages(batch)}))
    thread, out = _in_thread(other.update_actor, batch, {"global_steps": 1})
    generated = engine.generate(prompt_batch(), GEN)
    metrics = _joined(thread, out, "update_actor")
    assert tuple(generated["responses"].shape) == (4, RESPONSE_LENGTH), "generate beside an update must still work"
    assert all(math.isfinite(float(metrics[k])) for k in REQUIRED_ACTOR_METRICS), f"non-finite actor metrics {metrics}"


def weight_states(main_config: dict) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Two weight sets of the backend's model as a local actor sends them (``export_weights``): the
    initial policy, and the same with seeded noise as large as each weight's spread."""
    from rlflow.backends.local.local_engine import LocalEngine
    from rlflow.schemas.pipeline import Pipeline

    pipeline = Pipeline.model_validate(main_config["pipeline"])
    local = LocalEngine(
        pipeline, device="cpu", roles=frozenset({"actor"}), project_root=Path(main_config["project_root"])
    )
    first = local.export_weights()
    local.close()
    g = torch.Generator().manual_seed(0)
    second = {}
    for key, tensor in first.items():
        if not tensor.is_floating_point():
            second[key] = tensor.clone()
            continue
        scale = float(tensor.float().std()) if tensor.numel() > 1 else 0.02
        noise = torch.randn(tensor.shape, generator=g) * (scale or 0.02)
        second[key] = (tensor.float() + noise).to(tensor.dtype)
    return first, second


def check_rollout_weights(engine: RemoteBackend, other: RemoteBackend, main_config: dict, pushes: int = 6) -> None:
    """Weights pushed with their version change what the rollout serves; pushed on another connection
    while this one generates, each batch comes whole from one version and reports that version."""
    states = weight_states(main_config)
    greedy, prompts = dict(GEN, do_sample=False), prompt_batch()
    expected = []
    for version, state in enumerate(states, start=101):
        metrics = engine.load_rollout_weights(state, version)
        assert isinstance(metrics, dict) and all(isinstance(v, (int, float)) for v in metrics.values()), (
            f"load_rollout_weights must return a dict of numbers, got {metrics!r}"
        )
        out = engine.generate(prompts, greedy)
        assert out.metrics.get("rollout/policy_version") == version, (
            f"after load_rollout_weights(state, {version}) generate must report rollout/policy_version {version}, "
            f"got {out.metrics.get('rollout/policy_version')}"
        )
        expected.append(out["responses"])
    assert not torch.equal(*expected), "load_rollout_weights must change the weights the rollout serves"

    def push() -> None:
        for version in range(103, 103 + pushes):  # odd versions: the first state, even: the second
            other.load_rollout_weights(states[(version - 1) % 2], version)

    thread, out = _in_thread(push)
    seen = 0
    while thread.is_alive() or seen < 3:
        batch = engine.generate(prompts, greedy)
        version = batch.metrics.get("rollout/policy_version")
        assert version is not None and 101 <= version < 103 + pushes, f"generate reported version {version}"
        assert torch.equal(batch["responses"], expected[(int(version) - 1) % 2]), (
            f"a batch reported rollout/policy_version {version:g} but was not generated by that version's weights "
            "(weights loaded while it was generated, or a version reported for other weights)"
        )
        seen += 1
    _joined(thread, out, "load_rollout_weights")


def start_backend(name: str, main_config: dict) -> tuple[RemoteBackend, set[int]]:
    """create_backend, and the processes it started (to check that destroy stops them)."""
    before = _descendants()
    backend = create_backend(name, main_config)
    return backend, _descendants() - before


def check_destroy(backend: RemoteBackend, started: set[int]) -> None:
    """destroy() twice is fine, and every process the backend started is gone afterwards."""
    destroy_backend(backend)
    destroy_backend(backend)
    deadline = time.monotonic() + 20
    while (left := started & _descendants()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"destroy() must stop what the backend started; still running: {sorted(left)}"


TOOL_FILE = "conformance_tools.py"
_TOOL_SOURCE = '''"""The conformance kit's tool (rlflow.testing.remote_backend)."""
from verl.tools.function_tool import function_tool


@function_tool
def echo(text: str) -> str:
    """Say the text back.

    Args:
        text: what to say back.
    """
    return text
'''


def check_multi_turn(engine: RemoteBackend, project_root: str | Path) -> None:
    (Path(project_root) / TOOL_FILE).write_text(_TOOL_SOURCE)
    batch = prompt_batch()
    batch["reward_info"] = [{"extra_info": {"tools_kwargs": {"echo": {"create_kwargs": {}}}}}] * len(batch)
    turns = {"enable": True, "max_assistant_turns": 2, "function_tool_path": TOOL_FILE}
    out = engine.generate(batch, {**GEN, "multi_turn": turns})
    rows = len(batch)
    responses, mask = out["responses"], out["response_mask"]
    assert tuple(responses.shape) == (rows, RESPONSE_LENGTH), (
        f"a multi-turn generate must return one transcript of [{RESPONSE_LENGTH}] tokens per row, "
        f"got {tuple(responses.shape)}"
    )
    assert set(mask.unique().tolist()) <= {0, 1} and bool((mask[:, 0] == 1).all()), (
        "a transcript's response_mask holds 0 and 1 only, and its first token is the model's"
    )
    for key in ("num_turns", "tool_call_counts"):
        assert key in out and tuple(out[key].shape) == (rows,), f"a multi-turn generate must return {key} per row"
    assert bool((out["num_turns"] >= 2).all()), "num_turns counts verl's way: a prompt and one answer are 2"
    assert len(out["response_text"]) == rows, "response_text must be one str per row"


def check_backend(name: str, main_config: dict, checkpoint_dir: str | Path) -> None:
    """Every check in a run's order; raises AssertionError at the first broken contract."""
    backend, started = start_backend(name, main_config)
    try:
        check_class(name, backend)
        forwarder = check_reconnect(name, main_config, backend)
        check_init_sync(forwarder)
        batch = check_log_probs(forwarder, check_generate(forwarder))
        check_update_actor(forwarder, batch)
        check_sync(forwarder, 2)
        check_checkpoint(forwarder, batch, Path(checkpoint_dir))
        other = connect_backend(name, main_config, backend.reconnect_handle())
        check_generate_beside_update(forwarder, other, batch)
        if type(backend).accepts_rollout_weights:
            check_rollout_weights(forwarder, other, main_config)
        if type(backend).runs_agent_loop:
            check_multi_turn(forwarder, main_config["project_root"])
        other.close()
        forwarder.close()
    finally:
        check_destroy(backend, started)


class RemoteBackendConformance:
    """pytest base class: subclass it as ``Test...`` and set ``backend_name``.

    One backend serves the whole class (starting one can take a while). When the class is done
    its backend is destroyed twice and must leave no process behind; a failure there shows as
    an error in the teardown of the class's last test. Subclasses may add their own tests.
    """

    backend_name: ClassVar[str]
    backend_config: ClassVar[dict[str, Any]] = {}
    model: ClassVar[dict[str, Any]] = {}  # the pipeline's model: section; empty: the built-in tiny model

    @classmethod
    def make_main_config(cls, project_root: Path) -> dict[str, Any]:
        """The main_config every test uses; ``<project_root>/run`` stands for the run directory."""
        run_dir = Path(project_root) / "run"
        run_dir.mkdir(parents=True, exist_ok=True)  # a run's directory exists before its backends start
        return tiny_main_config(
            cls.backend_name, project_root, backend_config=cls.backend_config, model=cls.model, run_dir=run_dir
        )

    @pytest.fixture(scope="class")
    @classmethod
    def main_config(cls, tmp_path_factory) -> dict[str, Any]:
        return cls.make_main_config(tmp_path_factory.mktemp("conformance"))

    @pytest.fixture(scope="class")
    @classmethod
    def started(cls, main_config):
        backend, processes = start_backend(cls.backend_name, main_config)
        yield backend, processes
        check_destroy(backend, processes)

    @pytest.fixture(scope="class")
    @classmethod
    def backend(cls, started) -> RemoteBackend:
        return started[0]

    @pytest.fixture(scope="class")
    @classmethod
    def forwarder(cls, backend, main_config):
        joined = connect_backend(cls.backend_name, main_config, backend.reconnect_handle())
        check_init_sync(joined)
        yield joined
        joined.close()

    @pytest.fixture
    def batch(self, forwarder) -> Batch:
        return check_log_probs(forwarder, check_generate(forwarder))

    def test_class_and_single_forwarder(self, backend):
        check_class(self.backend_name, backend)

    def test_reconnect_by_handle_starts_nothing(self, backend, main_config):
        check_reconnect(self.backend_name, main_config, backend).close()

    def test_generate_shapes_and_masks(self, forwarder):
        check_generate(forwarder)

    def test_log_probs(self, forwarder, batch):
        check_log_probs(forwarder, batch)

    def test_update_actor(self, forwarder, batch):
        check_update_actor(forwarder, batch)

    def test_update_weights_and_global_steps(self, forwarder):
        check_sync(forwarder, 2)

    def test_checkpoint_round_trip(self, forwarder, batch, tmp_path):
        check_checkpoint(forwarder, batch, tmp_path / "ckpt")

    @pytest.fixture(scope="class")
    @classmethod
    def other_forwarder(cls, backend, main_config):
        joined = connect_backend(cls.backend_name, main_config, backend.reconnect_handle())
        yield joined
        joined.close()

    def test_async_generate_beside_an_update_elsewhere(self, forwarder, other_forwarder, batch):
        check_generate_beside_update(forwarder, other_forwarder, batch)

    def test_async_rollout_weights_carry_their_version(self, backend, forwarder, other_forwarder, main_config):
        if not type(backend).accepts_rollout_weights:
            pytest.skip(f"{self.backend_name} does not set accepts_rollout_weights (its actor trains inside it)")
        check_rollout_weights(forwarder, other_forwarder, main_config)

    def test_multi_turn_transcripts(self, backend, forwarder, main_config):
        if not type(backend).runs_agent_loop:
            pytest.skip(f"{self.backend_name} does not set runs_agent_loop (multi-turn rollouts run locally only)")
        check_multi_turn(forwarder, main_config["project_root"])
