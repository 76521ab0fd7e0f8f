"""Regenerate tests/fixtures/failures/: what real failed jobs leave for the failure report.

Each case runs one real 2-rank CPU job of the bundled tiny model through the real supervisor
(`python -m veri_tui.jobfolder.supervise`, which runs torchrun), with a fault injected by VERI_FAULT
(veri_tui/trainer/faults.py), then keeps what veri_tui/jobfolder/failures/failures.py reads, byte
for byte (pids and timestamps as they were): torchrun.log, elastic/**/error.json,
failures/rank-*.json. Also `captured.json`: the case, the fault, torch's version and the
supervisor's verdict then.

    python scripts/capture_failure_fixtures.py            # every case
    python scripts/capture_failure_fixtures.py kill peer  # some

Takes about half a minute per case on 2 cores. tests/launch/test_failure_rules.py reads the
result; rerun this after a torch upgrade and commit the change.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "trainer"))
from trainer_jobs import write_job  # noqa: E402  (the test harness, not a package)

OUT = REPO / "tests" / "fixtures" / "failures"
MAX_BYTES = 50_000  # a file over this has its tracebacks' middles cut

#: case -> (what it shows, VERI_FAULT, extra environment, job settings)
CASES: dict[str, tuple[str, str, dict[str, str], dict[str, Any]]] = {
    "kill": ("rank 1 SIGKILLs itself at step 2", "kill:1:2", {}, {}),
    "raise": ("rank 1 raises RuntimeError at step 2", "raise:1:2", {}, {}),
    "oom": ("rank 1 raises torch.OutOfMemoryError at step 2", "oom:1:2", {}, {"zero_stage": 3}),
    "ckpt": (
        "rank 0's DCP save raises CheckpointException (a BaseException) at step 2",
        "ckpt_raise:0:2",
        {},
        {"checkpoint_steps": 2},
    ),
    # torchrun polls its ranks every 0.1 s and then SIGTERMs the rest, usually before the
    # survivor notices. Polling every 5 s lets rank 0 fail on its own, on gloo's error.
    "peer": (
        "rank 1 SIGKILLs itself; rank 0 fails on the closed gloo connection",
        "kill:1:2",
        {"PET_MONITOR_INTERVAL": "5"},
        {"zero_stage": 2},
    ),
    # The OOM killer's victim can close its connections before torchrun can reap it: rank 0
    # fails on the closed connection first, torchrun SIGTERMs rank 1, which dies by SIGKILL.
    "late_kill": (
        "rank 1's connections close; its SIGKILL comes 3 s later, after torchrun's SIGTERM",
        "late_kill:1:2",
        {},
        {},
    ),
    "config": (
        "every rank rejects device 'tpu' (veri_tui.jobfolder.contract.errors.ConfigError)",
        "",
        {},
        {},
    ),
}


def run_case(name: str, work: Path) -> dict[str, Any]:
    """Run one case's job in ``work``; returns job.json after the supervisor ended."""
    what, fault, env_extra, settings = CASES[name]
    job = write_job(work / name, max_steps=4, **settings)
    if name == "config":
        record = json.loads(job.read_text())
        record["spec"]["device"] = "tpu"
        job.write_text(json.dumps(record, indent=1))
    env = {**os.environ, **env_extra}
    env.pop("VERI_FAULT", None)
    if fault:
        env["VERI_FAULT"] = fault
    cmd = [sys.executable, "-m", "veri_tui.jobfolder.supervise", "--job", str(job)]
    subprocess.run(cmd, cwd=REPO, env=env, timeout=300, check=False)
    return json.loads(job.read_text())


def _trim(path: Path, dest: Path) -> None:
    """Copy; a JSON file over MAX_BYTES keeps the start and end of each long string."""
    if path.stat().st_size <= MAX_BYTES or path.suffix != ".json":
        shutil.copy2(path, dest)
        return
    data = json.loads(path.read_text(encoding="utf-8"))

    def cut(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: cut(v) for k, v in value.items()}
        if isinstance(value, str) and len(value) > 8000:
            return value[:4000] + "\n... (cut by capture_failure_fixtures.py) ...\n" + value[-4000:]
        return value

    dest.write_text(json.dumps(cut(data)), encoding="utf-8")


def keep(name: str, job_dir: Path, record: dict[str, Any]) -> Path:
    """Copy the files the failure report reads into tests/fixtures/failures/<name>/."""
    dest = OUT / name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    files = [job_dir / "torchrun.log", *sorted(job_dir.glob("failures/rank-*.json"))]
    files += sorted(job_dir.glob("elastic/*/attempt_*/*/error.json"))
    for path in files:
        if path.is_file():
            target = dest / path.relative_to(job_dir)
            target.parent.mkdir(parents=True, exist_ok=True)
            _trim(path, target)
    import torch  # only for the version: the capture runs where the jobs ran

    what, fault, env_extra, _ = CASES[name]
    meta = {
        "case": name,
        "what": what,
        "veri_fault": fault,
        "environment": env_extra,
        "world_size": 2,
        "nproc_per_node": 2,
        "torch": torch.__version__,
        "python": platform.python_version(),
        # torchrun's summary prints local time: a reader elsewhere needs the offset.
        "utc_offset": time.strftime("%z"),
        "job_dir": str(job_dir),
        "exit_code": record.get("exit_code"),
        "supervisor_error": record.get("error"),
    }
    (dest / "captured.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return dest


def main(argv: list[str] | None = None) -> int:
    """Capture the named cases (all by default)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"some of {', '.join(CASES)} (default: all)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.cases) - set(CASES))
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    with tempfile.TemporaryDirectory(prefix="veri-failures-") as tmp:
        for name in args.cases or list(CASES):
            record = run_case(name, Path(tmp))
            dest = keep(name, Path(tmp) / name, record)
            err = record.get("error") or {}
            print(f"{name}: {err.get('code')} ({err.get('attribution')}) {err.get('summary')}")
            print(f"  -> {dest.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
