"""``LocalEngine``: the model roles of one local worker (torch + transformers): policy, critic, reward models, teachers.

The embedded default: on a laptop it trains the built-in tiny model on the CPU, and the same code runs one
worker per GPU. Design notes: docs/design/local_engine.md.
"""

from __future__ import annotations

import copy
import logging
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from rlflow.backends import agent_loop
from rlflow.backends.engine import Engine
from rlflow.backends.local import checkpoint, distributed, generation
from rlflow.backends.local.logprob import batch_log_probs
from rlflow.backends.local.models import load_model
from rlflow.batch import Batch, response_span
from rlflow.data.tokenizer import load_tokenizer
from rlflow.errors import BackendError
from rlflow.schemas.model_roles import MODEL_ROLES
from rlflow.tools.config import MultiTurnConfig
from rlflow.tools.runner import INVALID

log = logging.getLogger("rlflow.backends.local")

ALL_ROLES = frozenset({"actor", "rollout", "ref"})
GENERATION_ENGINES = ("torch", "hf")


def resolve_device(device: str) -> torch.device:
    """``cpu``, ``cuda[:i]``, or ``gpu``/``auto`` (the first visible GPU; ``auto`` falls back to the CPU)."""
    if device in ("gpu", "auto"):
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        if device == "gpu":
            raise BackendError(
                "local engine: device 'gpu' asked for, but torch sees no CUDA device; use device: cpu or auto"
            )
        return torch.device("cpu")
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise BackendError(f"local engine: device {device!r} asked for, but torch sees no CUDA device")
    return resolved


class LocalEngine(Engine):
    """The model roles (``rlflow.schemas.model_roles``) of one worker on one device."""

    def __init__(
        self,
        pipeline,
        *,
        device: str = "cpu",
        rank: int = 0,
        world_size: int = 1,
        roles: frozenset = ALL_ROLES,
        project_root: Path | None = None,
        dist: dict | None = None,
        total_training_steps: int | None = None,
        run_dir: str | Path | None = None,
    ) -> None:
        """``run_dir``: the run directory, where the tools' log goes (``tools/rank<N>.log``); None: no log."""
        unknown = set(roles) - set(MODEL_ROLES)
        if unknown or not roles:
            raise BackendError(
                f"local engine: roles must be a non-empty subset of {sorted(MODEL_ROLES)}, got {sorted(roles)}"
            )
        self.pipeline, self.rank, self.world_size = pipeline, rank, world_size
        self.project_root = Path(project_root) if project_root is not None else Path.cwd()
        self._tools: tuple[str, Any] | None = None  # (the multi_turn block as JSON, its ToolRunner)
        self._warned: set[str] = set()  # what the agent loop has warned of once already
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.roles = frozenset(roles)
        self.device = resolve_device(device)
        self.global_steps = 0
        if self.device.type == "cpu":
            torch.use_deterministic_algorithms(True, warn_only=True)
        trains = any(MODEL_ROLES[r].trainable for r in self.roles if r in MODEL_ROLES)
        if trains:  # only trained models' gradients need a process group
            distributed.init_group(rank, world_size, self.device, dist)
        self.tokenizer = load_tokenizer(pipeline.model, project_root)
        self.critic = None
        if "critic" in self.roles:
            from rlflow.backends.local.critic import Critic, load_value_model

            value_model = load_value_model(pipeline, self.tokenizer, root=project_root, device=self.device)
            distributed.broadcast_parameters(value_model, world_size)
            self.critic = Critic(
                value_model, pipeline, world_size=world_size, total_training_steps=total_training_steps
            )
        self.reward_model = self.judge_model = self.teachers = None
        if "reward_model" in self.roles:
            from rlflow.backends.local.reward_model import RewardModel

            self.reward_model = RewardModel(pipeline, root=project_root, device=self.device)
        if "judge" in self.roles:
            from rlflow.backends.local.judge import Judge

            self.judge_model = Judge(pipeline, root=project_root, device=self.device)
        if "teacher" in self.roles:
            from rlflow.backends.local.teacher import Teachers

            self.teachers = Teachers(pipeline, self.tokenizer, root=project_root, device=self.device)
        model = None
        if self.roles & {"actor", "rollout", "ref"}:
            model = load_model(
                pipeline.model, self.tokenizer, seed=pipeline.trainer.seed, root=project_root, device=self.device
            )
            distributed.broadcast_parameters(model, world_size if "actor" in self.roles else 1)
        self.ref = None
        if "ref" in self.roles and pipeline.algorithm.uses_reference:
            self.ref = copy.deepcopy(model).eval().requires_grad_(False)
        self.model = model if self.roles & {"actor", "rollout"} else None
        self.actor = None
        if "actor" in self.roles:
            from rlflow.backends.local.actor import Actor

            self.actor = Actor(model, pipeline, world_size=world_size, total_training_steps=total_training_steps)
        elif self.model is not None:
            self.model.requires_grad_(False)
        self.eos_token_ids = self._eos_ids()
        self.decode_graphs = None  # the CUDA rollout's decoders by shape bucket, built on first use

    def _eos_ids(self) -> tuple[int, ...]:
        """The tokenizer's EOS plus the model's generation-config EOS ids (chat models list several)."""
        model = self.model if self.model is not None else self.ref
        extra = model.generation_config.eos_token_id if model is not None else None
        ids = {self.tokenizer.eos_token_id, *(extra if isinstance(extra, list) else [extra])}
        return tuple(sorted(i for i in ids if i is not None))

    def _need(self, role: str, what: str):
        module = {
            "ref": self.ref,
            "critic": self.critic,
            "reward_model": self.reward_model,
            "judge": self.judge_model,
            "teacher": self.teachers,
        }.get(role, self.model)
        if role not in self.roles or module is None:
            why = " (the algorithm uses no KL)" if role == "ref" and not self.pipeline.algorithm.uses_reference else ""
            raise BackendError(
                f"local engine rank {self.rank}: {what} needs the {role!r} role, which this worker "
                f"does not hold{why}; it holds {sorted(self.roles)}"
            )
        return module

    # ---- rollout ----------------------------------------------------------------------------
    def generate(self, batch: Batch, params: dict[str, Any]) -> Batch:
        model = self._need("rollout", "generate")
        engine = params.get("engine", "torch")
        self._check_generation_engine(engine)
        sp = self._sampling_params(params)
        if len(batch) == 0:  # an empty shard: nothing to decode, same widths as everyone else
            empty = torch.zeros((0, sp.max_new_tokens), dtype=torch.long)
            return Batch({"responses": empty, "response_mask": empty.clone()}, {"response_text": []})
        multi_turn = MultiTurnConfig.model_validate(params.get("multi_turn") or {})
        extra_tensors, extra_metrics = {}, {}
        if multi_turn.enable:
            responses, mask, log_probs, extra_tensors, extra_metrics = self._multi_turn(
                model, engine, batch, sp, params, multi_turn
            )
        else:
            responses, mask, log_probs = self._sample(model, engine, batch, sp, params)
        responses, mask = responses.cpu(), mask.cpu()
        tensors = {"responses": responses, "response_mask": mask, **extra_tensors}
        if log_probs is not None:  # verl's rollout_log_probs: the rollout-vs-actor metrics read them
            tensors["rollout_log_probs"] = log_probs.cpu()
        out = Batch(tensors, {"response_text": self._decode(responses, mask)})
        # a ratio, not a count: the runtime averages shard metrics
        first_is_eos = torch.isin(responses[:, 0], torch.tensor(self.eos_token_ids))
        out.metrics = {
            "rollout/empty_response_ratio": first_is_eos.float().mean().item(),
            "rollout/policy_version": float(self.global_steps),
            **extra_metrics,
        }
        return out

    def _tool_runner(self, config: MultiTurnConfig):
        from rlflow.tools.runner import ToolRunner

        key = config.model_dump_json()
        if self._tools is None or self._tools[0] != key:
            self._close_tools()
            log_path = self.run_dir / "tools" / f"rank{self.rank}.log" if self.run_dir is not None else None
            self._tools = (key, ToolRunner(config, self.project_root, log_path))
        return self._tools[1]

    def _close_tools(self) -> None:
        if self._tools is not None:
            self._tools[1].close()
            self._tools = None

    def _multi_turn(self, model, engine, batch, sp, params, config: MultiTurnConfig):
        """The agent loop over ``_sample``: responses, the mask (0 on tool tokens), log-probs, ``num_turns``, metrics."""
        pad = self.tokenizer.pad_token_id
        prompts = [row[m.bool()].tolist() for row, m in zip(batch["prompts"], batch["prompt_mask"], strict=True)]
        kept_log_probs = engine == "torch"

        def decode(sequences: list[list[int]], max_new: int, turn: int):
            width = max(len(s) for s in sequences)
            ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], dtype=torch.long)
            seq_mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], dtype=torch.long)
            turn_params = replace(sp, max_new_tokens=max_new, seed=generation.chunk_seed(sp.seed, 1000 + turn))
            rows = Batch({"prompts": ids, "prompt_mask": seq_mask})
            tokens, mask, log_probs = self._sample(model, engine, rows, turn_params, params)
            lengths = mask.sum(-1).tolist()
            out_lp = log_probs.cpu().tolist() if log_probs is not None else None
            return [
                (tokens[i, :n].tolist(), out_lp[i][:n] if out_lp is not None else [0.0] * n)
                for i, n in enumerate(lengths)
            ]

        runner = self._tool_runner(config) if config.has_tools else None
        tools_kwargs = agent_loop.rows_tools_kwargs(batch)

        def call_tools(calls):
            if runner is None:
                return [agent_loop.ToolResult(INVALID, "Error: no tools are configured", error=True) for _ in calls]
            return runner.call([c for _, c in calls], [tools_kwargs[r] for r, _ in calls])

        rows = agent_loop.run_agent_loop(
            prompts,
            decode,
            call_tools,
            agent_loop.ToolTurn(self.tokenizer).tokens,
            lambda ids: self.tokenizer.decode(ids),
            config,
            sp.max_new_tokens,
        )
        metrics = agent_loop.tool_metrics(rows)
        agent_loop.warn_once(rows, sp.max_new_tokens, self._warned)
        if runner is not None:
            runner.rollout_done(metrics)
        width = sp.max_new_tokens
        responses = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        log_probs = torch.zeros((len(rows), width), dtype=torch.float32)
        for i, row in enumerate(rows):
            n = len(row.tokens)
            responses[i, :n] = torch.tensor(row.tokens, dtype=torch.long)
            mask[i, :n] = torch.tensor(row.mask, dtype=torch.long)
            log_probs[i, :n] = torch.tensor(row.log_probs, dtype=torch.float32)
        num_turns = torch.tensor([row.num_turns for row in rows], dtype=torch.long)
        return (
            responses,
            mask,
            log_probs if kept_log_probs else None,
            {"num_turns": num_turns, "tool_call_counts": torch.tensor([len(row.calls) for row in rows])},
            metrics,
        )

    def _check_generation_engine(self, engine: str) -> None:
        if engine not in GENERATION_ENGINES:
            raise BackendError(
                f"generate: engine {engine!r} is not available in the local backend "
                f"(it offers {', '.join(GENERATION_ENGINES)}); set the generate stage's engine to torch"
            )

    def _sampling_params(self, params: dict[str, Any]) -> generation.SamplingParams:
        return generation.SamplingParams(
            max_new_tokens=int(params.get("max_response_length", self.pipeline.data.max_response_length)),
            eos_token_ids=self.eos_token_ids,
            pad_token_id=self.tokenizer.pad_token_id,
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            top_k=int(params.get("top_k", -1)),
            do_sample=bool(params.get("do_sample", True)),
            seed=int(params.get("seed", 0)),
        )

    def _sample(
        self, model, engine: str, batch: Batch, sp: generation.SamplingParams, params: dict[str, Any]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(responses, response_mask, log-probs as sampled or None) for the rows of ``batch``; subclasses add engines.

        Only the torch loops keep the sampled tokens' log-probs; HF ``generate`` would have to keep
        every step's full-vocabulary scores for them. On CUDA the torch engine decodes with the
        static cache and a CUDA graph (``static_decode``; its decoders, graphs included, are kept
        between calls in ``decode_graphs``), elsewhere with ``sample_with_log_probs``.
        """
        from rlflow.backends.local import static_decode  # imports transformers: only once a model decodes

        model.eval()
        prompts, prompt_mask = batch["prompts"], batch["prompt_mask"]
        max_rows = generation.decode_rows_limit(params.get("max_num_seqs"), next(model.parameters()).device)
        if engine == "hf":
            sampler = partial(generation.sample_hf, model)
            return (*generation.sample_in_chunks(sampler, prompts, prompt_mask, sp, max_rows), None)
        use_cache = bool(params.get("use_cache", True))
        if use_cache and static_decode.use_static_decode(model):
            if self.decode_graphs is None:
                self.decode_graphs = static_decode.DecodeGraphs()
            sampler = partial(static_decode.sample_static, model, graphs=self.decode_graphs)
        else:
            sampler = partial(generation.sample_with_log_probs, model, use_cache=use_cache)
        return generation.sample_in_chunks(sampler, prompts, prompt_mask, sp, max_rows)

    def _decode(self, responses: torch.Tensor, mask: torch.Tensor) -> list[str]:
        """The text of each response: every token up to its last model token (a transcript keeps its tool turns)."""
        rows = responses.tolist()
        lengths = response_span(mask).sum(-1).tolist()
        return self.tokenizer.batch_decode([r[:n] for r, n in zip(rows, lengths)], skip_special_tokens=True)

    # ---- log-probs --------------------------------------------------------------------------
    def compute_log_prob(self, batch: Batch, params: dict[str, Any]) -> Batch:
        model = self._need("actor", "compute_log_prob")
        model.eval()
        log_probs, entropys = batch_log_probs(
            model,
            batch,
            micro_batch_size=params.get("micro_batch_size"),
            max_token_len=params.get("max_token_len"),
            packed=self.pipeline.model.use_remove_padding,
            temperature=float(params.get("temperature", 1.0)),
            with_entropy=True,
        )
        return Batch({"old_log_probs": log_probs, "entropys": entropys})

    def compute_ref_log_prob(self, batch: Batch, params: dict[str, Any]) -> Batch:
        ref = self._need("ref", "compute_ref_log_prob")
        log_probs, _ = batch_log_probs(
            ref,
            batch,
            micro_batch_size=params.get("micro_batch_size"),
            max_token_len=params.get("max_token_len"),
            packed=self.pipeline.model.use_remove_padding,
            temperature=float(params.get("temperature", 1.0)),
            with_entropy=False,
        )
        return Batch({"ref_log_prob": log_probs})

    # ---- update -----------------------------------------------------------------------------
    def update_actor(self, batch: Batch, params: dict[str, Any]) -> dict[str, float]:
        self._need("actor", "update_actor")
        return self.actor.update(
            batch,
            temperature=float(params.get("temperature", 1.0)),
            step=int(params.get("global_steps", self.global_steps)),
            stage=str(params.get("stage", "update_actor")),
        )

    # ---- critic -----------------------------------------------------------------------------
    def compute_values(self, batch: Batch, params: dict[str, Any]) -> Batch:
        critic = self._need("critic", "compute_values")
        values = critic.values(batch, params.get("micro_batch_size"))
        return Batch({"values": values})

    def update_critic(self, batch: Batch, params: dict[str, Any]) -> dict[str, float]:
        critic = self._need("critic", "update_critic")
        step = int(params.get("global_steps", self.global_steps))
        return critic.update(batch, step=step, stage=str(params.get("stage", "update_critic")))

    # ---- models beside the policy: reward model, judge, teachers ------------------------------
    def compute_rm_score(self, batch: Batch, params: dict[str, Any]) -> Batch:
        scorer = self._need("reward_model", "compute_rm_score")
        return Batch({"rm_scores": scorer.score(batch["raw_prompt"], batch["response_text"], params)})

    def judge(self, batch: Batch, params: dict[str, Any]) -> Batch:
        judge = self._need("judge", "judge")
        return Batch(non_tensors={"verdict_text": judge.verdicts(batch["judge_prompt"], params)})

    def compute_teacher_log_probs(self, batch: Batch, params: dict[str, Any]) -> Batch:
        teachers = self._need("teacher", "compute_teacher_log_probs")
        return Batch(teachers.log_probs(batch, params))

    # ---- weights ----------------------------------------------------------------------------
    def update_weights(self, global_steps: int) -> dict[str, float]:
        """Colocated rollout reads the actor's tensors directly: nothing to copy.

        An actor-only or rollout-only engine has nothing to do here either: across pools the
        runtime moves ``export_weights()`` into ``load_rollout_weights`` on the rollout side.
        """
        start = time.perf_counter()
        self.set_global_steps(global_steps)
        return {"sync/bytes": 0.0, "sync/seconds": time.perf_counter() - start}

    def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = int(global_steps)

    def export_weights(self) -> dict[str, torch.Tensor]:
        """The actor's weights as CPU tensors (tied weights once), for a rollout on another pool."""
        model = self._need("actor", "export_weights")
        out, seen = {}, set()
        for key, tensor in model.state_dict().items():
            if tensor.data_ptr() in seen:  # a tied weight: the rollout re-ties it on load
                continue
            seen.add(tensor.data_ptr())
            out[key] = tensor.detach().to("cpu", copy=True)
        return out

    def load_rollout_weights(self, state: dict[str, torch.Tensor], global_steps: int) -> dict[str, float]:
        model = self._need("rollout", "load_rollout_weights")
        start = time.perf_counter()
        # checked before anything loads: weights that do not fit leave the rollout as it was
        expected = {k: tuple(t.shape) for k, t in model.state_dict().items()}
        missing = [k for k in expected if k not in state and not _tied(model, k)]
        unexpected = [k for k in state if k not in expected]
        reshaped = [
            f"{k} {tuple(t.shape)}" for k, t in state.items() if k in expected and tuple(t.shape) != expected[k]
        ]
        if missing or unexpected or reshaped:
            raise BackendError(
                f"load_rollout_weights: weights do not match the rollout model (missing {missing[:5]}, unexpected "
                f"{unexpected[:5]}, other shapes {reshaped[:5]}); are both pools on the same model.path?"
            )
        model.load_state_dict(state, strict=False)
        size = sum(t.numel() * t.element_size() for t in state.values())
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.set_global_steps(global_steps)  # the rollout now serves this policy version
        return {"sync/bytes": float(size), "sync/seconds": time.perf_counter() - start}

    # ---- checkpoints ------------------------------------------------------------------------
    def _parts(self, what: str) -> list[tuple[Path, Any, Any]]:
        """(folder, model, trainer) of each model this worker checkpoints: the policy at the checkpoint's root
        (the actor's, else a lone rollout's), the critic under its part (``model_roles``)."""
        parts = []
        if self.model is not None:
            self._need("actor" if self.actor else "rollout", what)
            parts.append((Path(MODEL_ROLES["actor"].checkpoint_part), self.model, self.actor))
        if self.critic is not None:
            parts.append((Path(MODEL_ROLES["critic"].checkpoint_part), self.critic.hf_model, self.critic))
        return parts

    def save_checkpoint(self, path: str, global_steps: int) -> dict[str, Any]:
        meta = {
            "global_steps": int(global_steps),
            "rank": self.rank,
            "world_size": self.world_size,
            "roles": sorted(self.roles),
        }
        for part, model, trainer in self._parts("save_checkpoint"):
            state = trainer.state_dict() if trainer is not None else None
            checkpoint.save(Path(path) / part, self.rank, model=model, tokenizer=self.tokenizer, trainer_state=state,
                            meta=meta)  # fmt: skip
        return {"path": str(checkpoint.rank_dir(path, self.rank)), "global_steps": int(global_steps)}

    def load_checkpoint(self, path: str) -> dict[str, Any]:
        meta: dict[str, Any] = {}
        for part, model, trainer in self._parts("load_checkpoint"):
            state, meta = checkpoint.load(Path(path) / part, self.rank, model=model,
                                          expect_trainer_state=trainer is not None)  # fmt: skip
            if trainer is not None:
                trainer.load_state_dict(state)
        self.set_global_steps(meta["global_steps"])
        return {"path": str(checkpoint.rank_dir(path, self.rank)), "global_steps": meta["global_steps"]}

    def close(self) -> None:
        self.decode_graphs = None  # frees the decoders' caches and graphs
        self._close_tools()
        distributed.close_group()


def _tied(model, key: str) -> bool:
    """``key`` is a weight tied to another (e.g. ``lm_head.weight`` with tied embeddings)."""
    return key == "lm_head.weight" and bool(getattr(model.config, "tie_word_embeddings", False))
