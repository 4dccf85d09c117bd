"""Memory and time bombs in model answers: the reward worker stays small and every query ends in time.

Each case is scored by the real stage in a fresh subprocess (so its peak RSS, the ``VmHWM`` of
its own address space, belongs to that scoring alone, torch import included), as one ``cpu`` pool
worker would score it. ``getrusage``'s ``ru_maxrss`` would not do: Linux carries it across
``exec`` from the forked parent, so a large test process would be measured instead.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PEAK_RSS_LIMIT_MB = 512
TIMEOUT_S = 2.0
_TO_9999 = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM r WHERE i<9999)"

BOMBS = {
    # 9,999 rows of 5 MB hex text: 50 GB if fetched whole
    "hex_rows": f"{_TO_9999} SELECT hex(randomblob(2500000)) FROM r",
    # one row of 200 columns of 9 MB each: 1.8 GB in one row
    "wide_zeroblobs": "SELECT " + ", ".join(["zeroblob(9000000)"] * 200),
    # many small rows that add up: 9,999 x 100 kB
    "many_medium_rows": f"{_TO_9999} SELECT i, zeroblob(100000) FROM r",
    # one value past the per-value cap
    "one_huge_value": "SELECT group_concat(hex(randomblob(1000000))) FROM (" + _TO_9999 + " SELECT i FROM r)",
    # text doubled in a recursive CTE, selected four times: 64 MB
    "growing_text": "WITH RECURSIVE s(t) AS (SELECT 'x' UNION ALL SELECT t || t FROM s WHERE length(t) < 8000000) "
    "SELECT t, t, t, t FROM s",
}

_SCRIPT = """
import json, re, sys, time
import torch
from rlflow.batch import Batch
from rlflow.runtime.limits import limit_address_space
from rlflow.schemas.pipeline import Pipeline
from rlflow.stages.base import StageContext
from rlflow.stages.text2sql_reward import Text2SqlReward, Text2SqlRewardConfig

db, sql, config, address_space_mb = json.loads(sys.argv[1])
limit_address_space(address_space_mb)
spec = Pipeline.model_validate({"name": "t", "data": {"train": "x.json"}, "stages": []})
ctx = StageContext(pipeline=spec, config=Text2SqlRewardConfig(**config), stage_name="reward")
batch = Batch({"response_mask": torch.ones(1, 4, dtype=torch.long)},
              {"response_text": ["```sql\\n" + sql + "\\n```"],
               "reward_info": [{"ground_truth": "SELECT 1", "extra_info": {"db_path": db}}]})
start = time.monotonic()
out = Text2SqlReward().run(batch, ctx)
print(json.dumps({"seconds": time.monotonic() - start, "score": out["scores"].tolist()[0],
                  "extra": out["reward_extra"][0],
                  "peak_rss_mb": int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read())[1]) / 1024}))
"""


def score_in_subprocess(db, sql: str, config: dict, address_space_mb: int | None = None) -> dict:
    arg = json.dumps([str(db), sql, config, address_space_mb])
    done = subprocess.run([sys.executable, "-c", _SCRIPT, arg], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_memory_bombs_score_zero_in_bounded_memory_and_time(company_db, name):
    got = score_in_subprocess(company_db, BOMBS[name], {"timeout_s": TIMEOUT_S, "format_score": 0.1})
    assert got["peak_rss_mb"] < PEAK_RSS_LIMIT_MB, got
    assert got["seconds"] < TIMEOUT_S + 1, got
    assert got["score"] == 0.0 and got["extra"]["error"] + got["extra"]["timeout"] == 1, got


def test_a_memory_error_under_the_address_space_limit_is_one_rows_zero(company_db):
    """With the size cap lifted, the worker's RLIMIT_AS is what stops the hex rows; the step goes on."""
    import resource

    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import torch, rlflow.stages.text2sql_reward\nprint(open('/proc/self/statm').read().split()[0])",
        ],
        capture_output=True,
        text=True,
    )
    mapped_mb = int(probe.stdout.split()[0]) * resource.getpagesize() // 2**20
    config = {"timeout_s": 30.0, "max_result_mb": 100_000.0}
    got = score_in_subprocess(company_db, BOMBS["hex_rows"], config, address_space_mb=mapped_mb + 400)
    assert got["score"] == 0.0 and got["extra"]["error"] == 1, got
    assert got["peak_rss_mb"] < mapped_mb + 400, got
