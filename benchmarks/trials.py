"""The long trials: the tests marked `trial`, which the suite leaves out (pyproject.toml).

    python benchmarks/trials.py [-n WORKERS] [--write]

Each is a test of its own (real torchrun, sshd and Slurm, as in the suite) whose one run
takes a minute or more: several failures in a row, or a quality comparison of many runs.
The suite keeps a shorter test of each feature they exercise (docs/trials.md names it).
This runs `pytest -m trial` with the given xdist workers (default 2, as in CI), then prints
one row per test (outcome, seconds) and the command's wall time; `--write` puts that table
in docs/trials.md between its "trials:begin" and "trials:end" lines. Exits with pytest's
status, so a failing trial fails the run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "trials.md"
BEGIN, END = "<!-- trials:begin -->", "<!-- trials:end -->"


def run(workers: int, junit: Path) -> tuple[int, float]:
    """`pytest -m trial` from the repository root; (its exit status, its wall seconds)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "trial", f"--junitxml={junit}"]
    if workers > 1:
        cmd += ["-n", str(workers), "--dist", "loadgroup"]
    start = time.monotonic()
    code = subprocess.run(cmd, cwd=ROOT, check=False).returncode
    return code, time.monotonic() - start


def rows(junit: Path) -> list[tuple[str, str, float]]:
    """(test id, outcome, seconds) of each test in a junit file."""
    out = []
    for case in ET.parse(junit).iter("testcase"):
        name = case.get("name", "").split("@")[0]
        test = f"{case.get('classname', '').replace('.', '/')}.py::{name}"
        outcome = "passed"
        if case.find("skipped") is not None:
            outcome = "skipped"
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        out.append((test, outcome, float(case.get("time") or 0)))
    return out


def table(found: list[tuple[str, str, float]], wall: float, workers: int) -> str:
    """The markdown table of one run, with when and how it ran."""
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Run {when}, `python benchmarks/trials.py -n {workers}`, {os.cpu_count()} CPUs: "
        f"{wall:.0f} s wall.",
        "",
        "| trial | outcome | seconds |",
        "|---|---|---|",
    ]
    lines += [f"| `{test}` | {outcome} | {secs:.1f} |" for test, outcome, secs in found]
    return "\n".join(lines)


def write(text: str) -> None:
    """Replace what docs/trials.md holds between its markers."""
    doc = DOC.read_text()
    head, rest = doc.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    tmp = DOC.with_suffix(".md.tmp")
    tmp.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    tmp.replace(DOC)


def main(argv: list[str] | None = None) -> int:
    """Run the trials, print their table, optionally write it to the doc; pytest's status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2, help="pytest-xdist workers (default 2)")
    ap.add_argument("--write", action="store_true", help="write the table to docs/trials.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        junit = Path(tmp) / "trials.xml"
        code, wall = run(args.n, junit)
        found = rows(junit) if junit.is_file() else []
    text = table(found, wall, args.n)
    print(text)
    if args.write and found:
        write(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
