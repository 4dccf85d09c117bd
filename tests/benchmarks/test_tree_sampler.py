"""The benchmarks' CPU sampler: a process that changes its name (as Ray's workers do) leaves the CPU it used under
its old name there, so no process group's CPU seconds ever go down."""

from __future__ import annotations

import subprocess
import sys
import time

from benchmarks import common

BURN = 0.3  # CPU seconds the child burns under its first name
BURN_THEN_RENAME = f"""
import sys, time
start = time.process_time()
while time.process_time() - start < {BURN}:
    pass
sys.stdin.readline()
with open("/proc/self/comm", "w") as comm:
    comm.write("renamed")
time.sleep(0.3)
"""


def test_a_renamed_process_keeps_its_past_cpu_in_its_old_group():
    proc = subprocess.Popen([sys.executable, "-c", BURN_THEN_RENAME], stdin=subprocess.PIPE, text=True)
    with common.TreeSampler(proc.pid, interval=0.05) as sampler:
        deadline = time.monotonic() + 120
        while sampler.cpu_s < BURN and time.monotonic() < deadline:  # sampled under its first name
            time.sleep(0.05)
        proc.communicate("rename now\n", timeout=120)
    final = sampler.cpu_by_name[-1][1]
    assert "renamed" in final and len(final) == 2, final
    before = next(group for group in final if group != "renamed")
    assert final[before] >= BURN, final
    for (_, earlier), (_, later) in zip(sampler.cpu_by_name, sampler.cpu_by_name[1:]):
        assert all(later[group] >= seconds for group, seconds in earlier.items()), (earlier, later)
