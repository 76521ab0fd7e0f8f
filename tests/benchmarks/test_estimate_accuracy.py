"""benchmarks/estimate_accuracy.py: every measured figure traceable to its quoted source row,
the shapes' parameter counts equal to the published ones, the committed throughput constants
at the fit's optimum, the eager targets on the fitted and held-out llm-foundry rows, and
docs/accuracy.md in step with what the script computes now."""

from __future__ import annotations

import re
from pathlib import Path

import accuracy_report
import estimate_accuracy
import pytest
from published_runs import PUBLISHED_PARAMS, RUNS

from veri_tui.plan import throughput

DOC = Path(estimate_accuracy.ROOT) / "docs" / "accuracy.md"


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    dirs = estimate_accuracy.checkpoints(tmp_path_factory.mktemp("shapes"))
    return estimate_accuracy.evaluate(dirs)


def _figures(quote: str) -> set[float]:
    return {float(x.replace(",", "")) for x in re.findall(r"\d[\d,]*(?:\.\d+)?", quote)}


def test_every_measured_figure_is_in_its_quoted_row() -> None:
    assert len(RUNS) >= 8 and len({r.id for r in RUNS}) == len(RUNS)
    for run in RUNS:
        figures = _figures(run.quote)
        total = run.tokens_per_s_per_gpu * run.gpu_count  # sources that give a total
        assert run.tokens_per_s_per_gpu in figures or round(total) in figures, run.id
        if run.peak_memory_bytes is not None:
            stated = {run.peak_memory_bytes / 1e9, run.peak_memory_bytes / 2**30}
            assert any(round(x, 1) in figures for x in stated), run.id


def test_shapes_have_the_published_parameter_counts(rows: list[dict]) -> None:
    for r in rows:
        published = PUBLISHED_PARAMS.get(r["run"].shape)
        if published is not None:  # exact, or to the digits the source prints (14.84B)
            assert abs(r["parameters"] - published) < 0.0005 * published, r["run"].id


def test_constants_are_the_fits_optimum_and_eager_targets_hold(rows: list[dict]) -> None:
    fit = estimate_accuracy.fit(rows)
    assert fit["elementwise_bytes"] == throughput.ELEMENTWISE_BYTES
    for gpu, arch in estimate_accuracy.ARCH.items():
        assert throughput.MATMUL_EFFICIENCY[gpu] == fit["efficiency"][arch]
    mpt = [r for r in rows if r["run"].id.startswith("mpt-")]
    assert len([r for r in mpt if r["run"].fit]) == len(fit["rows"]) == 10
    for r in mpt:  # fitted and held-out llm-foundry rows alike
        assert abs(r["tokens_ratio"] - 1) <= accuracy_report.TARGET_TOKENS, r["run"].id


def test_the_doc_is_what_the_script_computes(rows: list[dict]) -> None:
    """Ratios within 0.02 of the committed page: rerun the script when the planner moves."""
    text = DOC.read_text()
    for r in rows:
        line = next((ln for ln in text.splitlines() if f"`{r['run'].id}` |" in ln), None)
        assert line is not None, f"{r['run'].id} missing: python benchmarks/estimate_accuracy.py"
        cells = [c.strip() for c in line.split("|")]
        written = float(cells[8].split()[0])
        assert abs(written - r["tokens_ratio"]) <= 0.02, (
            f"{r['run'].id}: docs say {written}, the plan now {r['tokens_ratio']:.2f}; "
            "rerun python benchmarks/estimate_accuracy.py"
        )
