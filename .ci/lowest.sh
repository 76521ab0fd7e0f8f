#!/usr/bin/env bash
# CI step: the lowest versions pyproject.toml allows, so its `>=` floors stay true.
# Every `name>=X` in [project] dependencies and in the train and dev extras is pinned to X
# (a constraints file derived here, never written by hand) and installed into a second fresh
# virtual environment; then the tests that reach the floored packages' APIs run there. torch
# is the exception: it stays 2.13.0 (the wheel this machine has), as in the main step.
#
# Which tests: each floored package's callers, not the whole fast suite (which is mostly
# the planner and the job folder's stdlib code, the same at any floor). `-m "not slow"` of:
#   tests/plan                      pydantic, pydantic-core (the knob schema, validation),
#                                   huggingface-hub (model sources), tokenizers (token counts)
#   tests/app, tests/notebook       textual, rich, plotext (the app under its pilot)
#   tests/web/test_serve_auth.py    textual-serve, aiohttp, aiohttp-jinja2, jinja2
#   tests/trainer                   transformers, peft, tokenizers, safetensors, datasets
#   tests/launch/test_datasets.py   datasets (parquet, CSV, save_to_disk, Hub ids)
#   tests/launch/test_export.py     huggingface-hub's push refusals
# then, all their tests, the slow files that reach the floors the fast ones cannot: the
# trainer's jobs (artifacts saved and loaded through transformers and peft) and paramiko
# against a real sshd. Both runs use 2 workers, one group per module as in the main suite.
# pytest, pytest-asyncio, pytest-timeout, pytest-xdist and hypothesis run them.
# Left out: snapshot tests (their SVGs are the current textual's drawing, not a contract with
# older ones), tests/launch's other files, tests/slurm's and tests/benchmarks' fast tests
# and the two repository checks (stdlib and the job folder's own code: no floor reached that
# the set above misses).
#
# `.ci/lowest.sh install` only installs, `.ci/lowest.sh test` only tests (.ci/run installs
# beside the main install, then tests after the suite); no argument does both. The install
# is an editable one of $VERI_CI_SRC when set (.ci/run's copy of the tree, so that it does
# not build in the tree the main install is building), else of the checkout; the tests run
# from the checkout either way.
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE  # installed with --no-compile: imports write the caches
cd "$(dirname "$0")/.."

phase=${1:-all}
venv=${VERI_LOWEST_VENV:-/tmp/veri-ci-lowest}
pins="$venv/lowest-constraints.txt"
src=${VERI_CI_SRC:-$PWD}

install() {
  python3.11 -m venv --clear "$venv"
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
  python - pyproject.toml >"$pins" <<'EOF'
"""Print `name==X` for every `name>=X` requirement; a requirement without a floor fails."""
import re
import sys
import tomllib

project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project["optional-dependencies"]
for req in project["dependencies"] + extras["train"] + extras["dev"]:
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([^,;\s]+)(,[^;]*)?", req.strip())
    if m is None:
        sys.exit(f"lowest.sh: {req!r} in pyproject.toml has no `>=` floor to test")
    if m.group(1) != "torch":  # 2.13.0 only: the wheel on this machine's disk
        print(f"{m.group(1)}=={m.group(3)}")
EOF
  echo "lowest versions (from pyproject.toml):"
  sed 's/^/  /' "$pins"
  # --no-compile: byte-compiling every installed file (torch's thousands) is most of the
  # install's time; the tests compile what they import.
  pip install -q --no-compile -c "$pins" torch==2.13.0 -e "$src[train,dev]"
  python -m pip check
  echo "lowest.sh: installed in ${SECONDS}s"
}

run_tests() {
  # shellcheck disable=SC1091
  . "$venv/bin/activate"
  python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup -m "not slow" \
    --ignore=tests/app/test_app_snapshots.py tests/plan tests/app tests/notebook \
    tests/web/test_serve_auth.py tests/trainer tests/launch/test_datasets.py \
    tests/launch/test_export.py
  python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup \
    tests/trainer/test_trainer_runs.py tests/ssh/test_ssh_connect.py tests/ssh/test_ssh_hostkeys.py
  echo "lowest.sh: done in ${SECONDS}s"
}

case "$phase" in
  install) install ;;
  test) run_tests ;;
  all) install; run_tests ;;
  *) echo "usage: .ci/lowest.sh [install|test]" >&2; exit 2 ;;
esac
