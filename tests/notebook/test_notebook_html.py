"""A plan record as notebook HTML, parsed back with html.parser; executed by nbclient if it
is installed (it is not a dependency: that test skips without it).

The parser collects each element's text and inline style, so the checks read what a
notebook shows: the header lines, the plan line, one bar segment per memory part, the
throughput and cost lines, refusals in red, and user text escaped rather than run.
"""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from support.synthetic import write_checkpoint

from veri_tui.notebook import plan_view
from veri_tui.plan import plan
from veri_tui.plan.html import RED, memory_parts, record_html


class Elements(HTMLParser):
    """(tag, style, title, text) of every element, and the whole text in order."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.items: list[dict[str, str]] = []
        self.text: list[str] = []
        self._open: list[dict[str, str]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        item = {"tag": tag, "text": "", **{k: v or "" for k, v in attrs}}
        self.items.append(item)
        self._open.append(item)

    def handle_endtag(self, tag: str) -> None:
        self._open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._open:
            self._open[-1]["text"] += data

    def with_text(self, fragment: str) -> list[dict[str, str]]:
        return [i for i in self.items if fragment in i["text"]]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("VERI_HOME", str(tmp_path / "veri"))


def test_the_record_renders_every_part_of_the_plan() -> None:
    rec = plan(gpu_count=2, lora_rank=8)
    page = Elements(rec._repr_html_())
    assert rec._repr_html_() == record_html(rec) == plan_view(rec)._repr_html_()
    text = "".join(page.text)
    for line in [*rec.header_lines, rec.plan_line]:
        assert page.with_text(line), line
    assert "throughput: ~" in text and "tokens/s" in text
    assert "cost: not estimated (no dataset given)" in text
    assert "fits: 15.3 GB of the budget left" in text
    parts = memory_parts(rec)
    assert [name for name, _ in parts] == [
        "frozen_base",
        "weights",
        "gradients",
        "optimizer",
        "activations",
    ]
    segments = [i for i in page.items if i.get("title", "").split(":")[0] in dict(parts)]
    assert len(segments) == len(parts)
    widths = [float(s["style"].split("width:")[1].split("%")[0]) for s in segments]
    assert all(w >= 0 for w in widths) and sum(widths) <= 100
    assert page.with_text("budget") and not page.with_text(f"color:{RED}")


def test_a_plan_that_does_not_fit_is_red_with_its_suggestions(tmp_path) -> None:
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "intermediate_size": 12288,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "num_hidden_layers": 28,
        "vocab_size": 32000,
        "tie_word_embeddings": False,
        "max_position_embeddings": 4096,
    }
    write_checkpoint(tmp_path / "big", config)
    rec = plan(model=str(tmp_path / "big"), gpu="L4-24GB", zero_stage=0)
    assert not rec.fits and rec.suggestions
    page = Elements(record_html(rec))
    (line,) = page.with_text(rec.plan_line)
    assert f"color:{RED}" in line["style"]
    (verdict,) = page.with_text("does not fit: ")
    assert f"color:{RED}" in verdict["style"]
    assert page.with_text(f"1. {rec.suggestions[0].text}")


def test_refusals_show_in_red_instead_of_raising() -> None:
    view = plan_view(zero_stage=1, micro_batch_size=0)
    assert view.record is None and len(view.errors) >= 2
    page = Elements(view._repr_html_())
    refusals = [i for i in page.items if i["text"].startswith("error: ")]
    assert {r["text"].split(":")[1].strip() for r in refusals} == {"zero_stage", "micro_batch_size"}
    assert all(f"color:{RED}" in r["style"] for r in refusals)
    assert page.with_text(f"plan refused: {len(view.errors)} errors")


def test_user_text_is_escaped() -> None:
    rec = plan()._replace(
        header_lines=["model: <script>alert('x')</script> & <b>bold</b>"],
        warnings=['dataset "<img src=x onerror=alert(1)>"'],
    )
    html = record_html(rec)
    assert "<script>" not in html and "<img" not in html and "<b>" not in html
    text = "".join(Elements(html).text)
    assert "<script>alert('x')</script> & <b>bold</b>" in text
    assert "<img src=x onerror=alert(1)>" in text


def test_a_notebook_shows_the_record_and_plan_view_as_html(tmp_path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    cells = [
        "from veri_tui.plan import plan\nplan(gpu_count=2)",
        "from veri_tui.notebook import plan_view\nplan_view(zero_stage=1)",
        "import sys\nprint(sorted(m for m in ('ipywidgets', 'aiohttp') if m in sys.modules))",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3").execute(cwd=str(tmp_path))
    first, second, third = (c.outputs[0] for c in nb.cells)
    assert "plan: dp=2 " in first["data"]["text/html"]
    assert "error: zero_stage:" in second["data"]["text/html"]
    assert third["text"].strip() == "[]"  # neither widgets nor the web server's stack
