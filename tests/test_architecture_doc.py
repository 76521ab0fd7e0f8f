"""docs/architecture.md's package arrows are the code's: the list between its `arrows`
marks equals the import graph import-linter checks (grimp, function-level imports included,
TYPE_CHECKING ones left out as the contracts leave them), and the layers the doc names are
the layers contract's in pyproject.toml; the device side's contracts (the job folder's package,
the trainer) forbid every other part of veri_tui."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


def _package(module: str) -> str:
    """A module's package as the doc draws it: `veri_tui.<sub>`, else the top package."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "veri_tui" else parts[0]


def _code_arrows() -> dict[str, set[str]]:
    graph = grimp.build_graph("veri_tui", exclude_type_checking_imports=True)
    arrows: dict[str, set[str]] = {}
    for module in graph.modules - {"veri_tui"}:  # its __init__ imports nothing (checked below)
        arrows.setdefault(_package(module), set())
        for imported in graph.find_modules_directly_imported_by(module):
            if _package(imported) != _package(module):
                arrows[_package(module)].add(_package(imported))
    assert graph.find_modules_directly_imported_by("veri_tui") == set()
    return arrows


def _doc_arrows() -> dict[str, set[str]]:
    block = DOC.split("<!-- arrows -->")[1].split("<!-- /arrows -->")[0]
    arrows: dict[str, set[str]] = {}
    for line in block.strip().strip("`").strip().splitlines():
        source, _, targets = line.partition("->")
        arrows[source.strip()] = {t.strip() for t in targets.split(",") if t.strip()}
    return arrows


def test_the_doc_s_arrows_are_the_import_graph() -> None:
    assert _doc_arrows() == _code_arrows()


def test_the_doc_s_layers_are_the_layers_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["type"] == "layers" and "containers" not in c]
    text = re.search(r"The layers, top to bottom .*?included\): (.*?)\. Within", DOC, re.S)
    assert text is not None
    named = [part.strip().strip("`") for part in re.sub(r"\s+", " ", text[1]).split(";")]
    assert named == layers


def test_the_doc_s_rooms_are_the_job_folder_s_layers_contract() -> None:
    """The rooms table of docs/architecture.md, top to bottom, names the rooms of the job
    folder's layers contract in its order, and every sub-package of veri_tui/jobfolder."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c.get("containers") == ["veri_tui.jobfolder"]]
    section = DOC.split("its rooms\n")[1].split("\n## ")[0]
    rows = [ln.split("|")[1] for ln in section.splitlines() if ln.startswith("| ")][1:]
    named = [sorted(re.findall(r"`(\w+)(?:/|\.py)`", row)) for row in rows]
    assert named == [sorted(p.strip() for p in layer.split("|")) for layer in layers]
    rooms = {
        p.name for p in (ROOT / "veri_tui" / "jobfolder").iterdir() if (p / "__init__.py").exists()
    }
    assert rooms == {r for row in named for r in row} - {"__main__"}


def test_the_device_side_contracts_forbid_every_other_part_of_veri_tui() -> None:
    """The job folder's package and the trainer live inside veri_tui but run on hosts without
    the rest of it: their `forbidden` contracts name every other part of veri_tui, so a part
    added later is forbidden to them only once it is listed here (this test fails until)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    parts = {
        f"veri_tui.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "veri_tui").iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").is_file()
    }
    allowed = {"veri_tui.jobfolder": set(), "veri_tui.trainer": {"veri_tui.jobfolder"}}
    for source, may in allowed.items():
        (forbidden,) = [
            set(c["forbidden_modules"])
            for c in contracts
            if c["type"] == "forbidden" and c["source_modules"] == [source]
        ]
        missing = parts - {source} - may - forbidden
        assert missing == set(), f"{source}'s contract does not forbid {sorted(missing)}"
