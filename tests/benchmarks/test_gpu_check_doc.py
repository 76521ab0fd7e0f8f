"""docs/gpu-check.md's tables are what `python benchmarks/gpu_check.py --prepare`
plans now, one per GPU a device machine may be: every prepared run is listed with the plan's
allocated and device peaks, tokens/s and MFU (the figures a GPU run is set beside). A
planner change that moves them must move the doc too (it had drifted once: the LoRA runs'
adapters changed and the table kept the old peaks)."""

from __future__ import annotations

import json
from pathlib import Path

import gpu_check
import gpu_check_report

DOC = Path(gpu_check.__file__).resolve().parents[1] / "docs" / "gpu-check.md"
# The prepared table's columns the doc keeps (the measured ones are filled on a GPU).
KEPT = ("alloc plan GB", "device plan GB", "tok/s/GPU plan", "MFU plan")


def _rows(lines: list[str], header: str) -> dict[str, dict[str, str]]:
    """{run: {column: cell}} of the markdown table whose header line starts with `header`."""
    start = next(i for i, ln in enumerate(lines) if ln.startswith(header))
    names = [c.strip() for c in lines[start].strip("|").split("|")]
    out = {}
    for ln in lines[start + 2 :]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip("|").split("|")]
        out[cells[0]] = dict(zip(names, cells, strict=True))
    return out


def test_the_docs_tables_are_the_default_preparation(tmp_path: Path) -> None:
    assert gpu_check.main([str(tmp_path / "prep"), "--prepare", "--no-fetch"]) == 0
    index = json.loads((tmp_path / "prep" / "plan.json").read_text())
    assert index["gpus"] == ["H100-80GB", "H200-141GB"]
    for gpu in index["gpus"]:
        table = gpu_check_report.render(index["plans"][gpu], []).splitlines()
        prepared = _rows(table, "| run | covers | status")
        documented = _rows(DOC.read_text().splitlines(), f"| run ({gpu}) | covers | alloc plan")
        assert set(documented) == set(prepared), "python benchmarks/gpu_check.py --prepare"
        for name, row in prepared.items():
            for column in KEPT:
                got = documented[name][column]
                assert got == row[column], (gpu, name, column, row[column])
