"""SIGKILLs at random moments of checkpoint saves, then resume: never from a partial step.

    python benchmarks/bench_crash_save.py [--seed S] [--kills 20] [--cancels 3] [--markdown F]

Each kill trial launches the bundled tiny model on 2 CPU ranks through the real launcher
(supervisor, torchrun), `max_steps` 5 with a checkpoint after every step. It waits for
`checkpoints/step-N.tmp` to appear (N drawn from 1-4: a save has begun), sleeps a random time within
the save and SIGKILLs one of rank 0, rank 1, torchrun or the supervisor (drawn). How long a save
takes on this machine is measured first, by a run without a kill (each `step-N.tmp` timed from its
appearance to its rename): the sleep is drawn from 0 to that median, so the kills land inside saves
whatever the machine's speed (`--max-delay-ms` fixes it instead). Once the attempt is over (a killed
supervisor's ranks are ended as `resume` would end them), it checks that every visible `step-N` is
complete (COMPLETE, `.metadata`, every file's size and sha256 as its manifest says, hashed here
independently of veri_tui/jobfolder/contract/ckptindex.py), notes the newest such step, runs
`resume` and waits: the new attempt must start from exactly that step (`resumed_from_step` and the
log's `resume: attempt 2 from step-N (verified)`), succeed, and leave each step once in
metrics.jsonl. Cancel trials cancel during a save (a `step-N.tmp` is there) and during the artifact
write (its `.output.tmp-<pid>` is there) and check that no partial folder is left visible or aside.
Draws come from `random.Random(seed)`; the seed is printed. Results go into docs/reliability.md (the
table this prints with --markdown).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from veri_tui.jobfolder.contract.layout import (  # noqa: E402
    SUPERVISOR_PID,
    TORCHRUN_PID,
    veri_home,  # noqa: E402
)
from veri_tui.jobfolder.contract.procs import end_processes, read_pid  # noqa: E402
from veri_tui.jobfolder.contract.status import has_ended  # noqa: E402
from veri_tui.launch import jobs  # noqa: E402
from veri_tui.plan import load_job_config  # noqa: E402

STEPS = 5
SETS = [f"max_steps={STEPS}", "checkpoint_steps=1", "max_seq_length=64", "keep_checkpoints=2"]
TARGETS = ("rank 0", "rank 1", "torchrun", "supervisor")


def wait_for(pred, timeout: float, poll: float = 0.005):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := pred():
            return value
        time.sleep(poll)
    raise TimeoutError


def sound(folder: Path) -> bool:
    """A complete checkpoint, checked here from its own files (not by trainer code)."""
    try:
        files = json.loads((folder / "manifest.json").read_text())["files"]
    except (OSError, ValueError, KeyError):
        return False
    for name, meta in files.items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != meta["size"]:
            return False
        if hashlib.sha256(path.read_bytes()).hexdigest() != meta["sha256"]:
            return False
    return (folder / "COMPLETE").is_file() and (folder / ".metadata").is_file()


def visible_steps(job_dir: Path) -> dict[int, bool]:
    """Every visible `step-N` folder and whether it is complete."""
    out = {}
    for folder in (job_dir / "checkpoints").glob("step-*"):
        if m := re.fullmatch(r"step-(\d+)", folder.name):
            out[int(m.group(1))] = sound(folder)
    return out


def launch() -> tuple[str, Path]:
    job_id = jobs.launch(load_job_config(None, gpu_count=2, sets=SETS), None)
    return job_id, veri_home() / "jobs" / job_id


def victim(job_dir: Path, target: str) -> int | None:
    names = {"rank 0": "pids/rank-0", "rank 1": "pids/rank-1"}
    names.update({"torchrun": TORCHRUN_PID, "supervisor": SUPERVISOR_PID})
    return read_pid(job_dir / names[target])


def save_seconds() -> float:
    """The median time a save takes here: one job without a kill, each `step-N.tmp` timed
    from its appearance to its rename."""
    job_id, job_dir = launch()
    seen: dict[int, list[float]] = {}
    checked = 0.0
    while True:
        now = time.monotonic()
        for step in range(1, STEPS + 1):
            tmp = job_dir / "checkpoints" / f"step-{step}.tmp"
            if step not in seen and tmp.exists():
                seen[step] = [now]
            elif len(seen.get(step, ())) == 1 and not tmp.exists():
                seen[step].append(now)
        if now - checked > 0.2:
            checked = now
            if has_ended(jobs.get_job(job_id)):
                break
        time.sleep(0.002)
    spans = sorted(t[1] - t[0] for t in seen.values() if len(t) == 2)
    if not spans:
        raise SystemExit("the calibration run showed no checkpoint save")
    return spans[len(spans) // 2]


def kill_trial(rng: random.Random, n: int, max_delay: float) -> dict:
    target, step = rng.choice(TARGETS), rng.randint(1, STEPS - 1)
    delay = rng.uniform(0, max_delay)
    job_id, job_dir = launch()
    tmp = job_dir / "checkpoints" / f"step-{step}.tmp"
    wait_for(lambda: tmp.exists() or (job_dir / "checkpoints" / f"step-{step}").exists(), 180)
    time.sleep(delay)
    at_kill = "saving" if tmp.exists() else "committed"
    os.kill(victim(job_dir, target), signal.SIGKILL)
    if target == "supervisor":
        time.sleep(0.5)
        end_processes(job_dir / "job.json", grace=2.0)  # what resume does to a lost job
    wait_for(lambda: has_ended(jobs.get_job(job_id)), 300, 0.2)
    steps = visible_steps(job_dir)
    expected = max((s for s, ok in steps.items() if ok), default=None)
    jobs.resume(job_id)
    final = jobs.target_for(job_id).wait(job_id, poll_s=0.2)
    resumed = final["attempts"][-1]["resumed_from_step"]
    log = (job_dir / "log.txt").read_text()
    where = f"step-{expected} (verified)" if expected is not None else "step 0 (no checkpoint)"
    metric_steps = [
        json.loads(x)["step"] for x in (job_dir / "metrics.jsonl").read_text().split("\n") if x
    ]
    ok = (
        all(steps.values())
        and resumed == expected
        and f"resume: attempt 2 from {where}" in log
        and final["status"] == "succeeded"
        and metric_steps == list(range(1, STEPS + 1))
    )
    return {
        "trial": n,
        "what": f"SIGKILL {target}",
        "save": f"step-{step}",
        "delay_ms": round(delay * 1000),
        "at kill": at_kill,
        "visible": sorted(steps),
        "expected": expected,
        "resumed": resumed,
        "ok": ok,
    }


def partial_left(job_dir: Path, output: Path) -> list[str]:
    """Partial folders visible or left aside after a cancel."""
    bad = [p.name for p in (job_dir / "checkpoints").glob("step-*.tmp")]
    bad += [s for s, ok in visible_steps(job_dir).items() if not ok]
    bad += [p.name for p in output.parent.glob(f".{output.name}.tmp-*")]
    if output.exists() and not (output / "manifest.json").is_file():
        bad.append(output.name)
    return [str(b) for b in bad]


def cancel_trial(rng: random.Random, n: int, during: str) -> dict:
    job_id, job_dir = launch()
    output = Path(jobs.get_job(job_id)["spec"]["output_dir"])
    step = rng.randint(1, STEPS - 1)
    if during == "save":
        marker = lambda: (job_dir / "checkpoints" / f"step-{step}.tmp").exists()  # noqa: E731
    else:
        marker = lambda: any(output.parent.glob(f".{output.name}.tmp-*"))  # noqa: E731
    try:
        wait_for(marker, 180, 0.002)
        seen = True
    except TimeoutError:
        seen = False
    jobs.cancel(job_id)
    record = jobs.get_job(job_id)
    left = partial_left(job_dir, output)
    ok = not left and record["status"] in ("cancelled", "succeeded")
    return {
        "trial": n,
        "what": f"cancel during {during}",
        "save": f"step-{step}" if during == "save" else "artifact",
        "delay_ms": 0,
        "at kill": "writing" if seen else "missed",
        "visible": sorted(visible_steps(job_dir)),
        "expected": record["status"],
        "resumed": ",".join(left) or "none left",
        "ok": ok,
    }


COLUMNS = ("trial", "what", "save", "delay_ms", "at kill", "visible", "expected", "resumed", "ok")


def table(rows: list[dict]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join("| " + " | ".join(str(r[c]) for c in COLUMNS) + " |\n" for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--cancels", type=int, default=3, help="of each kind (save, artifact)")
    parser.add_argument("--markdown", type=Path, help="also write the table here")
    parser.add_argument("--max-delay-ms", type=float, help="default: a save's median time here")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    print(f"seed {seed}", flush=True)
    rng = random.Random(seed)
    os.environ["VERI_HOME"] = tempfile.mkdtemp(prefix="crash-save-")
    t0, rows = time.monotonic(), []
    if args.max_delay_ms is not None:
        max_delay, why = args.max_delay_ms / 1000, "given"
    else:
        max_delay, why = save_seconds(), "a save's median time here"
    print(f"kill delays drawn from 0 to {max_delay * 1000:.0f} ms ({why})", flush=True)
    plan = [("kill", None)] * args.kills + [
        ("cancel", "save"),
        ("cancel", "artifact"),
    ] * args.cancels
    for n, (kind, during) in enumerate(plan, 1):
        row = kill_trial(rng, n, max_delay) if kind == "kill" else cancel_trial(rng, n, during)
        rows.append(row)
        print(json.dumps(row), flush=True)
    took = time.monotonic() - t0
    text = table(rows)
    kills = [r for r in rows if r["what"].startswith("SIGKILL")]
    cancels = [r for r in rows if r not in kills]
    summary = (
        f"seed {seed}: {sum(r['ok'] for r in kills)}/{len(kills)} kills resumed from the newest "
        f"complete verified step ({sum(r['at kill'] == 'saving' for r in kills)} of them with "
        f"the save still in flight); {sum(r['ok'] for r in cancels)}/{len(cancels)} cancels "
        f"left no partial folder; kill delays 0-{max_delay * 1000:.0f} ms; {took:.0f} s in all"
    )
    print(text + "\n" + summary)
    if args.markdown:
        args.markdown.write_text(text + "\n" + summary + "\n")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
