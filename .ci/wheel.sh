#!/usr/bin/env bash
# CI step: install veri-tui as released (a wheel, no -e) into a fresh virtual environment and
# use it from outside the repository: `veri-tui plan`, the app's first frame and a tiny local
# job must find the bundled model and datasets as package data (.ci/wheel_check.py).
# It builds from $VERI_CI_SRC when set (.ci/run's copy of the tree), else from the checkout.
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE  # installed with --no-compile: imports write the caches
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv=${VERI_WHEEL_VENV:-/tmp/veri-ci-wheel}
src=${VERI_CI_SRC:-$repo}
dist="$(mktemp -d)"

python3.11 -m venv --clear "$venv"
# shellcheck disable=SC1091
. "$venv/bin/activate"
pip wheel -q --no-deps -w "$dist" "$src"
pip install -q --no-compile torch==2.13.0 "$(ls "$dist"/veri_tui-*.whl)[train]"
cp "$repo/.ci/wheel_check.py" "$dist/"
cd "$dist"  # outside the repository: nothing of the checkout is importable from here
python wheel_check.py
echo "wheel.sh: done in ${SECONDS}s"
