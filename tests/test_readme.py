"""The README a new user starts from: its first screen clones, installs, plans and runs a first
job; it names no path outside the repository (the spec it follows is described in docs, not
pointed at); the CI history lives in docs/ci.md; and `.ci/run` runs the README's test command
word for word (its install half, then its suite half)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
FIRST_SCREEN = "\n".join(README.splitlines()[:40])


def test_the_first_screen_clones_installs_plans_and_launches() -> None:
    commands = [ln.strip() for ln in FIRST_SCREEN.splitlines() if ln.startswith("    ")]
    firsts = [next(i for i, c in enumerate(commands) if c.startswith(word)) for word in (
        "git clone ", "pip install ", "veri-tui plan", "veri-tui launch ")]  # fmt: skip
    assert firsts == sorted(firsts)  # in the order a new user runs them
    assert "&& cd veri-tui" in commands[firsts[0]]


def test_no_path_outside_the_repository() -> None:
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = doc.read_text(encoding="utf-8")
        assert not re.search(r"(?<![.\w])\.\./", text), doc.name  # `.../x` elisions aside


def test_the_ci_history_is_in_docs_not_the_readme() -> None:
    assert "| main at |" not in README and "| main at |" in (ROOT / "docs/ci.md").read_text()


def test_ci_runs_the_readmes_test_command() -> None:
    [command] = [ln.strip() for ln in README.splitlines() if "python -m pytest -q" in ln]
    install, suite = command.split(" && ")
    ci = [ln.strip() for ln in (ROOT / ".ci/run").read_text().splitlines()]
    assert install in ci and any(ln.startswith(suite) for ln in ci)
    assert command in (ROOT / "docs/ci.md").read_text()
