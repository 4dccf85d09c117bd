#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a CUDA GPU: the GPU tests, then the GPU benchmark.
#
#   bash scripts/gpu_check.sh                  # in an environment with rlflow installed and a GPU
#
# Where that machine has no network, install rlflow and its dependencies there from wheels
# carried along first (torch with CUDA is expected to be there already); packages put on
# PYTHONPATH stay visible to every subprocess the tests and the benchmark start.
#
# Results go to $OUT (default runs/gpu-check): gpu_tests.log, bench_gpu.log, gpu.json (copy it to
# benchmarks/results/gpu.json, then `python -m benchmarks.run_all --summary-only` writes the README row)
# and gpu_traces/ (torch.profiler traces of both log-prob passes). The whole check is sized for
# 8 minutes: each part has its own time limit (TESTS_TIMEOUT_S, BENCH_TIMEOUT_S), so one that hangs
# still leaves the other's results, and the benchmark writes its JSON after every part it finishes.
set -uo pipefail
OUT=${OUT:-runs/gpu-check}
mkdir -p "$OUT"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'; print(torch.cuda.get_device_name())" || exit 2
RLFLOW_TEST_GPU=1 timeout "${TESTS_TIMEOUT_S:-200}" python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 \
    | tee "$OUT/gpu_tests.log"
tests=${PIPESTATUS[0]}
timeout "${BENCH_TIMEOUT_S:-260}" python3 -m benchmarks.bench_gpu --out "$OUT/gpu.json" --timeout 150 2>&1 \
    | tee "$OUT/bench_gpu.log"
bench=${PIPESTATUS[0]}
echo "gpu_check: tests exit $tests, benchmark exit $bench; results in $OUT"
exit $((tests || bench))
