"""verl's own V1 replay buffer (``verl/trainer/ppo/v1/replay_buffer.py``), run here over an in-memory store.

verl's module needs its TransferQueue service, which is not installed; ``load_replay_buffer``
loads the module from the installed verl with ``FakeTransferQueue`` standing in for the
``transfer_queue`` package: the few key-value calls the buffer makes (``kv_list``,
``kv_batch_get``, ``kv_clear``, ``KVBatchMeta``), over dicts. ``Rollout`` plays verl's agent loop:
prompts it is given finish at once, each with ``n`` trajectories scored by a script, tagged as
verl's trainer tags them (the trainer's ``global_steps`` when they were sent). The tests then
compare what verl's buffer evicts, refills and samples with what rlflow does on the same input.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from rlflow.check.verl_source import verl_root

PARTITION = "train"


@dataclass
class KVBatchMeta:
    partition_id: str
    keys: list[str]
    tags: list[dict] = field(default_factory=list)


class FakeTransferQueue(types.ModuleType):
    """What verl's replay buffer asks of ``transfer_queue``: tags and values per partition and key."""

    def __init__(self) -> None:
        super().__init__("transfer_queue")
        self.KVBatchMeta = KVBatchMeta
        self.tags: dict[str, dict[str, dict]] = defaultdict(dict)
        self.values: dict[str, dict[str, dict]] = defaultdict(dict)

    def kv_list(self, partition_id: str | None = None) -> dict[str, dict[str, dict]]:
        parts = self.tags if partition_id is None else {partition_id: self.tags.get(partition_id, {})}
        return {p: {k: dict(t) for k, t in tags.items()} for p, tags in parts.items()}

    def kv_batch_get(self, keys: list[str], partition_id: str, select_fields: list[str]) -> dict[str, list]:
        return {f: [self.values[partition_id][k][f] for k in keys] for f in select_fields}

    def kv_clear(self, partition_id: str, keys: list[str]) -> None:
        for key in keys:
            self.tags[partition_id].pop(key, None)
            self.values[partition_id].pop(key, None)


def load_replay_buffer(monkeypatch) -> tuple[types.ModuleType, FakeTransferQueue]:
    """verl's ``replay_buffer`` module, freshly loaded over a fresh ``FakeTransferQueue``."""
    root = verl_root()
    if root is None:
        pytest.skip("verl is not installed")
    store = FakeTransferQueue()
    monkeypatch.setitem(sys.modules, "transfer_queue", store)
    path = root / "verl" / "trainer" / "ppo" / "v1" / "replay_buffer.py"
    spec = importlib.util.spec_from_file_location("verl_v1_replay_buffer_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, store


class Rollout:
    """verl's agent loop, finished at once: prompt ``i`` (from ``prompts``, in order) gets ``n`` trajectories
    whose ``acc`` is ``score(i, sample)``; ``sent`` records how many prompts each submission held."""

    def __init__(self, store: FakeTransferQueue, n: int, score: Callable[[int, int], float], prompts) -> None:
        self.store, self.n, self.score, self.prompts = store, n, score, iter(prompts)
        self.sent: list[int] = []
        self.global_steps = 1  # the trainer's step the next prompts are sent in (verl's tag)

    def submit(self, count: int) -> int:
        import torch

        for _ in range(count):
            index = next(self.prompts)
            uid = f"p{index}"  # verl splits keys at "_": a uid holds none
            self.store.tags[PARTITION][uid] = {
                "is_prompt": True,
                "status": "finished",
                "global_steps": self.global_steps,
            }
            for sample in range(self.n):
                key = f"{uid}_{sample}_0"
                acc = float(self.score(index, sample))
                self.store.tags[PARTITION][key] = {"global_steps": self.global_steps}
                self.store.values[PARTITION][key] = {
                    "rm_scores": torch.tensor([acc]),
                    "extra_fields": {"reward_extra_info": {"acc": acc}},
                }
        self.sent.append(count)
        return count


def sampled_prompts(batch: Any) -> list[int]:
    """The prompt indices of the trajectories in a batch verl's buffer sampled."""
    return sorted({int(key.split("_")[0][1:]) for key in batch.keys})
