#!/usr/bin/env bash
# One-GPU check of the bundled trainer (see benchmarks/gpu_check.py for what it measures).
# Needs python with torch, transformers and safetensors; nothing of veri_tui is imported and
# nothing is downloaded. Usage, from anywhere in the repo copy:
#   OUT=/some/dir benchmarks/gpu_check.sh            # Qwen3-0.6B shape, seq 2048, 30 steps
#   benchmarks/gpu_check.sh --device cpu --shape small --seq 128 --steps 2   # CPU smoke
# The whole run is capped at 8 minutes; results go to $OUT (gpu_check.json, gpu_check.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
"$PY" - <<'PY'
import importlib, sys
missing = [m for m in ("torch", "transformers", "safetensors") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_check: missing python packages: {', '.join(missing)}")
PY
if [ -n "${OUT:-}" ]; then
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
fi
exec timeout --signal=TERM --kill-after=20 480 "$PY" benchmarks/gpu_check.py "$@"
