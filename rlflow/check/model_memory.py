"""Do the models of each local GPU pool fit its GPUs' memory (``gpu_memory_gb`` under ``inventory.nodes``)?

A lower bound per worker: weights, gradients and optimizer state of the models the pool holds (a reward
model or teachers: their weights only, as they run forward passes), counted from the plan, the model-role
registry and the model folders' safetensors headers. Pure (no torch): it reads files only. Design notes: docs/design/fit.md.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Mapping
from pathlib import Path

from rlflow.assets import BUILT_IN_CODE, BUILTIN_PREFIX
from rlflow.plan.model import Plan
from rlflow.schemas.labels import matches
from rlflow.schemas.model_roles import MODEL_ROLES
from rlflow.schemas.subject import Reporter

GB = float(1 << 30)  # GPUs are sold in GiB ("80 GB": 81920 MiB), and gpu_memory_gb is read as such
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ADAM_BYTES = 8  # Adam's two fp32 moments per parameter
MASTER_BYTES = 4  # fp32 master weights of a model trained in half precision
MAX_HEADER = 100 << 20  # safetensors refuses larger headers too
Shapes = dict[str, tuple[int, ...]]
OWN_POOL_FIXES = {  # what moves a model beside the policy off a crowded pool
    "critic": "put the critic's stages on a pool of its own",
    "reward_model": "put the reward model's stage on a pool of its own (reward_model.enable_resource_pool: true)",
    "distillation": "put teacher_log_prob on a pool of its own",
}


def read_shapes(folder: Path) -> Shapes | None:
    """Every tensor's shape in a model folder's safetensors files (``model.safetensors``, else the shards of
    ``model.safetensors.index.json``, else every ``*.safetensors``); None when there are none or one is unreadable."""
    try:
        if (folder / "model.safetensors").is_file():
            files = [folder / "model.safetensors"]
        elif (folder / "model.safetensors.index.json").is_file():
            index = json.loads((folder / "model.safetensors.index.json").read_text(encoding="utf-8"))
            files = [folder / name for name in sorted(set(index["weight_map"].values()))]
        else:
            files = sorted(folder.glob("*.safetensors"))
        shapes: Shapes = {}
        for file in files:
            shapes.update(_header_shapes(file))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, struct.error):
        return None
    return shapes or None


def _header_shapes(file: Path) -> Shapes:
    """A safetensors file's tensors: an 8-byte little-endian header length, then JSON of name -> dtype, shape."""
    with open(file, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        if length > MAX_HEADER:
            raise ValueError(f"{file}: a header of {length} bytes")
        header = json.loads(f.read(length))
    return {name: tuple(int(n) for n in info["shape"]) for name, info in header.items() if name != "__metadata__"}


def builtin_shapes(name: str) -> Shapes | None:
    """The tensors of a model made in code (``builtin:tiny-qwen2``: a Qwen2 of ``BUILTIN_MODELS``' shape, its
    vocabulary the built-in tokenizer's, rounded up to 64 as the backend builds it); None for an unknown one."""
    from rlflow.backends.local.models import BUILTIN_MODELS
    from rlflow.data.tokenizer import BUILTIN_TOKENIZERS

    if name not in BUILTIN_MODELS or name not in BUILTIN_TOKENIZERS:
        return None
    try:
        tokenizer = json.loads((BUILTIN_TOKENIZERS[name] / "tokenizer.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ids = [*tokenizer["model"]["vocab"].values(), *(t["id"] for t in tokenizer.get("added_tokens", ()))]
    return qwen2_shapes(BUILTIN_MODELS[name], -(-(max(ids) + 1) // 64) * 64)


def qwen2_shapes(config: Mapping, vocab: int) -> Shapes:
    """The tensors of a Qwen2 causal LM of ``config`` (Qwen2Config's keyword arguments)."""
    h, inter = config["hidden_size"], config["intermediate_size"]
    kv = config["num_key_value_heads"] * (h // config["num_attention_heads"])
    shapes: Shapes = {"model.embed_tokens.weight": (vocab, h), "model.norm.weight": (h,)}
    for i in range(config["num_hidden_layers"]):
        layer = f"model.layers.{i}."
        for name, shape in {
            "self_attn.q_proj.weight": (h, h),
            "self_attn.q_proj.bias": (h,),
            "self_attn.k_proj.weight": (kv, h),
            "self_attn.k_proj.bias": (kv,),
            "self_attn.v_proj.weight": (kv, h),
            "self_attn.v_proj.bias": (kv,),
            "self_attn.o_proj.weight": (h, h),
            "mlp.gate_proj.weight": (inter, h),
            "mlp.up_proj.weight": (inter, h),
            "mlp.down_proj.weight": (h, inter),
            "input_layernorm.weight": (h,),
            "post_attention_layernorm.weight": (h,),
        }.items():
            shapes[layer + name] = shape
    if not config.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (vocab, h)
    return shapes


def parameters(shapes: Shapes) -> int:
    """How many numbers the tensors hold."""
    total = 0
    for shape in shapes.values():
        count = 1
        for n in shape:
            count *= n
        total += count
    return total


def value_model_parameters(policy: Shapes) -> int:
    """A critic made from the policy as verl makes it: the causal LM's body (no LM head) and a fresh one-label
    head (``hidden x 1`` and a bias)."""
    head = policy.get("lm_head.weight")
    embed = next((shape for name, shape in policy.items() if name.endswith("embed_tokens.weight")), None)
    hidden = (head or embed or (0,))[-1]
    return parameters(policy) - (head[0] * head[1] if head else 0) + hidden + 1


def worker_bytes(
    plan: Plan, pool: str, params: Mapping[str, int], dtypes: Mapping[str, str]
) -> dict[str, tuple[tuple[str, ...], float]]:
    """Per declared model a worker of ``pool`` holds (``model``, ``critic``): its roles there and the bytes of
    their weights, gradients and optimizer state, at least. ``params``/``dtypes``: each model's parameter count
    and dtype. A trained role: weights + gradients in its dtype, Adam's moments, fp32 master weights when in
    half precision, sharded by DeepSpeed's ZeRO over the pool's workers; a frozen one: a copy of the weights;
    a role sharing another's weights on the worker (the rollout the actor's): nothing."""
    roles, workers = plan.engine_roles(pool), plan.resources[pool].workers
    zero = _zero_stages(plan, pool)
    held: dict[str, tuple[tuple[str, ...], float]] = {}
    for block in plan.models(pool):
        mine = sorted(r for r in roles if r in MODEL_ROLES and MODEL_ROLES[r].block == block)
        size, total = DTYPE_BYTES[dtypes[block]], 0.0
        for name in mine:
            role = MODEL_ROLES[name]
            if role.shares_weights_with in roles:
                continue
            if not role.trainable:
                total += params[block] * size
                continue
            stage = zero.get(name, 0)
            shard = [1, 1, 1] if stage == 0 else [1 if stage < 3 else workers, 1 if stage < 2 else workers, workers]
            optim = ADAM_BYTES + (MASTER_BYTES if size < 4 else 0)
            total += params[block] * (size / shard[0] + size / shard[1] + optim / shard[2])
        held[block] = (tuple(mine), total)
    return held


def _zero_stages(plan: Plan, pool: str) -> dict[str, int]:
    """The ZeRO stage of each trained role on ``pool``: the actor's engine choice holds for every trained model
    (the critic trains with DeepSpeed when the actor does)."""
    update = plan.first_with_role("update")
    if update is None or update.config.get("engine") != "deepspeed":
        return {}
    stage = int(update.config.get("zero_stage", 0))
    return {r: stage for r in plan.engine_roles(pool) if r in MODEL_ROLES and MODEL_ROLES[r].trainable}


def check_memory(spec, plan: Plan, inventory, resolve: Callable[[str], Path], pools, report: Reporter) -> None:
    """One problem per pool of ``pools`` (local GPU pools) whose models need more memory per GPU, at least,
    than the smallest GPUs among the inventory nodes it may use have; a model whose size cannot be read
    (a missing folder: the path check says so) leaves its pool unchecked."""
    sizes: dict[str, int | None] = {}
    for pool in pools:
        res = spec.resources[pool]
        nodes = [
            n
            for n in inventory.nodes
            if n.gpu_memory_gb is not None and n.gpus >= res.gpus_per_node and matches(res.label_selector, n.labels)
        ]
        blocks = plan.models(pool)
        if not nodes or not blocks:
            continue
        for block in blocks:
            if block not in sizes:
                sizes[block] = _parameters(spec, block, resolve)
        if any(sizes[block] is None for block in blocks):
            continue
        dtypes = {
            "model": spec.model.dtype,
            "critic": spec.critic.model.dtype or spec.model.dtype,
            "reward_model": spec.reward_model.dtype or spec.model.dtype,
            "distillation": spec.model.dtype,  # the teachers' own dtypes are folded into their count
        }
        held = worker_bytes(plan, pool, {block: sizes[block] or 0 for block in blocks}, dtypes)
        need = sum(total for _, total in held.values())
        smallest = min(nodes, key=lambda n: n.gpu_memory_gb)
        if need <= smallest.gpu_memory_gb * GB:
            continue
        report(("resources", pool), *_message(pool, held, need, smallest, nodes, plan), at="key")


def _parameters(spec, block: str, resolve: Callable[[str], Path]) -> int | None:
    """The parameter count of a declared model (``model``, ``critic``, ``reward_model``, ``distillation``: every
    teacher, each counted in ``model.dtype``'s bytes); None when one cannot be read."""
    if block == "reward_model":
        shapes = _shapes(spec.reward_model.model_path or "", resolve)
        return parameters(shapes) if shapes is not None else None
    if block == "distillation":
        return _teacher_parameters(spec, resolve)
    own = spec.critic.model.path if block == "critic" else None
    shapes = _shapes(own or spec.model.path, resolve)
    if shapes is None:
        return None
    return value_model_parameters(shapes) if block == "critic" and own is None else parameters(shapes)


def _teacher_parameters(spec, resolve: Callable[[str], Path]) -> int | None:
    """The teachers' parameters, scaled to ``model.dtype``'s bytes (a teacher may have a dtype of its own):
    the teacher pool loads every teacher, frozen."""
    total, unit = 0.0, DTYPE_BYTES[spec.model.dtype]
    for teacher in spec.distillation.teacher_models.values():
        shapes = _shapes(teacher.model_path, resolve)
        if shapes is None:
            return None
        total += parameters(shapes) * DTYPE_BYTES[teacher.dtype or spec.model.dtype] / unit
    return round(total)


def _shapes(path: str, resolve: Callable[[str], Path]) -> Shapes | None:
    if not path:
        return None
    if path.removeprefix(BUILTIN_PREFIX) in BUILT_IN_CODE:
        return builtin_shapes(path.removeprefix(BUILTIN_PREFIX))
    try:
        return read_shapes(resolve(path))
    except ValueError:  # an unknown builtin: name
        return None


def _message(pool: str, held, need: float, smallest, nodes, plan: Plan) -> tuple[str, str]:
    def named(block: str, roles: tuple[str, ...]) -> str:
        return block if roles == (block,) else f"{block} ({', '.join(roles)})"

    what = " and ".join(named(block, roles) for block, (roles, _) in held.items())
    parts = f" ({', '.join(f'{block} {_gb(total)} GB' for block, (_, total) in held.items())})"
    same = len({n.gpu_memory_gb for n in nodes}) == 1
    have = "the inventory's GPUs" if same else f"the smallest GPUs it may use ({smallest.name}'s)"
    message = (
        f"pool {pool} holds {what}: at least {_gb(need)} GB of weights, gradients and optimizer state per GPU"
        f"{parts if len(held) > 1 else ''}; {have} have {smallest.gpu_memory_gb:g} GB"
    )
    fixes = []
    if len(held) > 1:
        fixes += [fix for block, fix in OWN_POOL_FIXES.items() if block in held]
    zero = _zero_stages(plan, pool)
    if "actor" in held.get("model", ((), 0))[0] and zero.get("actor", 0) < 3:
        fixes.append("shard with update_actor.with.engine: deepspeed and zero_stage: 3")
    elif zero:
        fixes.append("give the pool more GPUs (ZeRO shards over them)")
    fixes.append("use GPUs with more memory")
    fix = ", ".join(fixes[:-1]) + (", or " if len(fixes) > 1 else "") + fixes[-1]
    return message, fix


def _gb(size: float) -> str:
    return f"{size / GB:.1f}" if size >= GB else f"{size / GB:.2g}"
