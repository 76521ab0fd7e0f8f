#!/usr/bin/env bash
# One-GPU check of the bundled trainer against the plan (benchmarks/gpu_check.py says what it
# measures): feature runs (stage 3 on one rank, cpu_offload, LoRA + DPO + selective
# checkpointing + checkpoint save and resume, fp32, MoE, QLoRA) and two performance runs,
# judged against the plan of the GPU it finds (H100-80GB or H200-141GB).
#
# Here, where veri-tui is installed (plans both GPUs, fetches QLoRA's bitsandbytes wheel):
#   python benchmarks/gpu_check.py --prepare
# which writes benchmarks/gpu-check-prepared/: untracked and not git-ignored, so it travels
# with the working tree to a lent GPU machine. There (python with torch, transformers, peft,
# safetensors; no veri-tui dependencies needed):
#   OUT=/some/dir bash benchmarks/gpu_check.sh [DIR] [--rehearse]
# The whole run is capped at 8 minutes. $OUT gets four files, rewritten after every run:
# gpu_check.json, gpu_check.md, gpu_check.log and gpu_check_runs.tar.gz (every run's logs
# and records). Exit 0 when every run it could judge passed; 2 when DIR is not prepared.
# --rehearse runs every run here on fake CUDA, no GPU (benchmarks/gpu_check_rehearse.py):
# the same code, the same $OUT, within 10 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
DIR=benchmarks/gpu-check-prepared
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then DIR="$1"; shift; fi
"$PY" - <<'PY'
import importlib.util, sys
missing = [m for m in ("torch", "transformers", "peft", "safetensors") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"error: python: missing packages {', '.join(missing)}; install them or set PYTHON")
PY
if [ ! -f "$DIR/plan.json" ]; then
  "$PY" benchmarks/gpu_check.py --prepare "$DIR" || {
    echo "error: $DIR/plan.json missing and veri-tui cannot plan here: run 'python benchmarks/gpu_check.py --prepare $DIR' where veri-tui is installed, in the tree that travels (or name $DIR in the device run's carry)" >&2
    exit 2
  }
fi
# The python side budgets 430 s for everything (550 s rehearsing: 2 CPU cores trace what a
# GPU runs); this outer cap (TERM, then KILL 20 s later) is the guarantee. On TERM it stops
# the running job's whole process tree before exiting.
CAP=455
for arg in "$@"; do [ "$arg" = --rehearse ] && CAP=575; done
exec timeout --signal=TERM --kill-after=20 "$CAP" "$PY" benchmarks/gpu_check.py "$DIR" "$@"
