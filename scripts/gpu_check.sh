#!/usr/bin/env bash
# The GPU checks in one go, for a machine with a CUDA GPU: the GPU tests, then the GPU benchmark.
#
#   bash scripts/gpu_check.sh                  # in an environment with rlflow installed and a GPU
#
# Where that machine has no network, install rlflow and its dependencies there from wheels
# carried along first (torch with CUDA is expected to be there already).
#
# Results go to $OUT (default runs/gpu-check): gpu_tests.log, bench_gpu.log and gpu.json (copy it to
# benchmarks/results/gpu.json, then `python -m benchmarks.run_all --summary-only` writes the README row).
# Each part has its own time limit, so one that hangs still leaves the other's results.
set -uo pipefail
OUT=${OUT:-runs/gpu-check}
mkdir -p "$OUT"
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'; print(torch.cuda.get_device_name())" || exit 2
RLFLOW_TEST_GPU=1 timeout "${TESTS_TIMEOUT_S:-240}" python3 -m pytest -q -m gpu -p no:cacheprovider tests 2>&1 \
    | tee "$OUT/gpu_tests.log"
tests=${PIPESTATUS[0]}
timeout "${BENCH_TIMEOUT_S:-300}" python3 -m benchmarks.bench_gpu --out "$OUT/gpu.json" 2>&1 | tee "$OUT/bench_gpu.log"
bench=${PIPESTATUS[0]}
echo "gpu_check: tests exit $tests, benchmark exit $bench; results in $OUT"
exit $((tests || bench))
