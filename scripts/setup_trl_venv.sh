#!/usr/bin/env bash
# Build .venv-trl: a separate virtual environment holding TRL, for python -m benchmarks.bench_step and
# python -m benchmarks.bench_startup (rlflow's step next to TRL's GRPOTrainer doing the same work).
#
# Why a separate venv: TRL pulls accelerate, datasets and pandas, which rlflow does not need, and
# may ask for other versions of what rlflow's venv pins. torch stays on the CPU build 2.13.0 and
# transformers on the main venv's version, so both sides run the very same model code.
# rlflow is installed without its dependencies (plus the light ones its data and reward code
# need), so the TRL run loads the same prompts and scores them with the same SQL reward.
#
# Usage:  bash scripts/setup_trl_venv.sh
# Knobs:  RLFLOW_TRL_VENV (default <repo>/.venv-trl), TRL_VERSION (default 1.16.0),
#         PYTHON (default: the main venv's python, else python3.11)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${RLFLOW_TRL_VENV:-$ROOT/.venv-trl}"
TRL_VERSION="${TRL_VERSION:-1.16.0}"
if [[ -z "${PYTHON:-}" ]]; then
  PYTHON=python3.11
  command -v "$PYTHON" >/dev/null || PYTHON=python3
fi

# Same transformers as the main venv when it exists (same model code on both sides of the comparison).
TRANSFORMERS_PIN="transformers>=5.5.3,<5.11"
if [[ -x "$ROOT/.venv/bin/python" ]]; then
  MAIN_TF="$("$ROOT/.venv/bin/python" -c 'import importlib.metadata as m; print(m.version("transformers"))' 2>/dev/null || true)"
  [[ -n "$MAIN_TF" ]] && TRANSFORMERS_PIN="transformers==$MAIN_TF"
fi

CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
cat >"$CONSTRAINTS" <<PINS
torch==2.13.0
$TRANSFORMERS_PIN
PINS

if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install -q --upgrade pip wheel
"${PIP[@]}" install -q -c "$CONSTRAINTS" torch==2.13.0
"${PIP[@]}" install -q -c "$CONSTRAINTS" "trl==$TRL_VERSION" "$TRANSFORMERS_PIN"
# rlflow's data and reward code (prompts, SQL reward) and what they import; not Ray, not verl.
"${PIP[@]}" install -q -c "$CONSTRAINTS" pydantic jinja2 pyyaml typer rich msgpack psutil
"${PIP[@]}" install -q --no-deps -e "$ROOT"

"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("trl", "torch", "transformers", "accelerate", "datasets"):
    print(f"{name}=={md.version(name)}")
PY
echo "ready: $VENV"
