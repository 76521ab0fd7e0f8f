"""The benchmark scripts are not a package: make `benchmarks/` (and `tests/`, for
`support.synthetic`) importable for their tests."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT / "benchmarks", ROOT / "tests"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
