#!/usr/bin/env bash
# One-GPU check of the bundled trainer against the plan (benchmarks/gpu_check.py says what it
# measures): feature runs (stage 3 on one rank, cpu_offload, LoRA + DPO + selective
# checkpointing + checkpoint save and resume, fp32, MoE, QLoRA when a bitsandbytes wheel is
# carried) and two performance runs. On the GPU machine (python with torch, transformers,
# peft, safetensors; no veri-tui needed there):
#   OUT=/some/dir benchmarks/gpu_check.sh DIR
# where DIR was written where veri-tui is installed by
#   pip download --no-deps bitsandbytes -d benchmarks/wheels   # optional: QLoRA's wheel
#   python benchmarks/gpu_check.py --prepare DIR               # copies benchmarks/wheels/*.whl
# (if DIR has no plan.json and veri-tui imports here, it is prepared first). The whole run is
# capped at 8 minutes; the table and gpu_check.json are rewritten in $OUT after every run,
# and each run's log.txt, torchrun.log, supervisor.log, job.json and failure records are
# copied into $OUT/runs/<name>/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DIR="${1:-benchmarks/gpu-check-prepared}"
shift || true
"$PY" - <<'PY'
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "peft", "safetensors") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"error: python: missing packages {', '.join(missing)}; install them or set PYTHON")
PY
if [ ! -f "$DIR/plan.json" ]; then
  "$PY" benchmarks/gpu_check.py --prepare "$DIR" || {
    echo "error: $DIR: no plan.json; run 'python benchmarks/gpu_check.py --prepare $DIR' where veri-tui is installed and copy $DIR here" >&2
    exit 2
  }
fi
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
fi
# The python side budgets 430 s for everything; this outer cap (TERM, then KILL 20 s later)
# is the guarantee. On TERM it stops the running job's whole process tree before exiting.
exec timeout --signal=TERM --kill-after=20 455 "$PY" benchmarks/gpu_check.py "$DIR" "$@"
