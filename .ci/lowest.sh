#!/usr/bin/env bash
# CI step: the lowest versions pyproject.toml allows, so its `>=` floors stay true.
# Every `name>=X` in [project] dependencies and in the train and dev extras is pinned to X
# (a constraints file derived here, never written by hand) and installed into a second fresh
# virtual environment; then the fast tests run there (`-m "not slow"`: no torchrun, no sshd
# jobs), plus three slow files that exercise the floors the fast ones cannot: the trainer's
# jobs (artifacts saved and loaded through transformers and peft) and paramiko against a
# real sshd. torch is the exception: it stays 2.13.0 (the wheel this machine has), as in
# the main step. Snapshot tests are left out: their SVGs are the current textual's drawing,
# not a contract with older ones.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${VERI_LOWEST_VENV:-/tmp/veri-ci-lowest}
python3.11 -m venv --clear "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
pins="$venv/lowest-constraints.txt"

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
pip install -q --no-compile -c "$pins" torch==2.13.0 -e '.[train,dev]'
python -m pip check
echo "lowest.sh: installed in ${SECONDS}s"
python -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup -m "not slow" --ignore=tests/app/test_app_snapshots.py
python -m pytest -q -p no:cacheprovider tests/trainer/test_trainer_runs.py \
  tests/ssh/test_ssh_connect.py tests/ssh/test_ssh_hostkeys.py
echo "lowest.sh: done in ${SECONDS}s"
