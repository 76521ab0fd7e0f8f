"""`veri-tui launch assets/examples/sft-tiny.toml --canary --max-cost 0.01` for real: 2 CPU
ranks (gloo) run 3 steps longest-first, save and load back a checkpoint, the supervisor
prints the measured-vs-planned table and the extrapolated time and cost, and the gate decides.
The price per GPU-hour makes the gate's answer certain whatever this machine's speed: a
cheap GPU goes on to the artifact (at zero_stage 3: FSDP2's sharded tensors in the CPU
census), a dear one stops at the gate leaving a clear record and no process. Both runs
start at once and are shared by the tests (one module fixture)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from launch_helpers import leftover_pids, wait_ended

from veri_tui.bundled import assets_dir

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
EXAMPLE = str(assets_dir() / "examples" / "sft-tiny.toml")
CANARY = ["launch", EXAMPLE, "--canary", "--max-cost", "0.01"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """{"go": (home, completed process), "no-go": ...}: one launch each, side by side."""
    home = tmp_path_factory.mktemp("canary") / "veri-home"
    env = dict(os.environ, VERI_HOME=str(home))
    more = {"go": ["price_per_gpu_hour=0.0001", "zero_stage=3"],
            "no-go": ["price_per_gpu_hour=1000"]}  # fmt: skip
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "veri_tui", *CANARY, *(f"--set={s}" for s in sets)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )  # fmt: skip
        for name, sets in more.items()
    }
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=360)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    os.environ["VERI_HOME"], before = str(home), os.environ.get("VERI_HOME")
    try:
        yield {"home": home, **done}
    finally:
        if before is None:
            os.environ.pop("VERI_HOME")
        else:
            os.environ["VERI_HOME"] = before


def _table(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("canary: 3 steps on cpu x2"))
    return lines[start:]


def test_the_table_sets_every_term_beside_the_plan_and_extrapolates(runs: dict) -> None:
    out = runs["go"]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    table = _table(out.stdout)
    assert table[1].split() == ["term", "planned", "measured", "ratio"]
    for label in ("states", "activations + logits", "loss (logits, chunk)", "units in flight",
                  "optimizer step", "overhead", "allocated peak", "device peak"):  # fmt: skip
        row = next(ln.strip() for ln in table if ln.strip().startswith(label))
        cells = row[len(label) :].split()  # planned, measured (number and unit each), ratio
        assert len(cells) == 5 and "-" not in cells[:4], row  # every one measured on CPU
    assert any(ln.startswith("  step time (median after warm-up): data ") for ln in table)
    assert any(ln.startswith("  optimizer (clip + update): ") and "(the host, one thread)" in ln
               for ln in table)  # fmt: skip
    assert any(ln.startswith("  extrapolated: ") and "GPU-hours on 2 x L4-24GB, $" in ln
               for ln in table)  # fmt: skip
    assert "canary: go (max cost $0.01" in out.stdout


def test_go_continues_the_same_process_to_the_artifact(runs: dict) -> None:
    out = runs["go"]
    job_id = out.stdout.splitlines()[0]
    assert f"job {job_id} goes on detached" in out.stderr
    record = wait_ended(job_id, timeout=180)
    assert record["status"] == "succeeded", record
    job_dir = runs["home"] / "jobs" / job_id
    log = (job_dir / "log.txt").read_text()
    assert log.count("setup: model") == 1  # one load: steps 4-5 ran in the same ranks
    assert '"step": 5' in log and (job_dir / "output" / "config.json").is_file()
    block = record["canary"]
    assert block["decision"] == "go" and block["steps"] == 3
    ranks = [json.loads((job_dir / "canary" / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert all(r["resume_ok"] for r in ranks)
    # Worst case first: step 1 carried more tokens than any later canary step.
    assert ranks[0]["tokens"][0] >= max(ranks[0]["tokens"][1:])
    memory = ranks[0]["memory"]
    assert memory["states_bytes"] > 0 and memory["activations_bytes"] > 0
    assert memory["device_source"] == "VmHWM" and memory["reserved_peak_bytes"] is None
    terms = {t["term"]: t for t in block["terms"]}
    assert terms["states"]["measured"] == pytest.approx(terms["states"]["planned"], rel=0.01)
    assert 0 < terms["in_flight"]["measured"] <= terms["in_flight"]["planned"]  # stage 3
    # The census counts a DTensor as its shard: the update's window is near the plan's
    # AdamW temporary (counted at the wrappers' global size it read 7x).
    assert terms["optimizer_step"]["measured"] < 2 * terms["optimizer_step"]["planned"]
    # Each rank timed its clipping and update, set beside the plan's same step on the host
    # (one thread, as a CPU rank runs it).
    opt = block["optimizer"]
    mine = [r["split_s"]["optimizer"] for r in ranks]
    assert opt["per_rank"] == mine and opt["measured"] == max(mine) > 0
    assert opt["planned"] == record["predicted"]["optimizer_host_s"] > 0


def test_no_go_stops_at_the_gate_with_a_clear_record_and_no_process(runs: dict) -> None:
    out = runs["no-go"]
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = out.stdout.splitlines()[0]
    record = json.loads((runs["home"] / "jobs" / job_id / "job.json").read_text())
    assert record["status"] == "cancelled" and record["error"] is None
    line = record["canary"]["line"]
    assert line.startswith("canary: no-go: --max-cost 0.01: extrapolated $")
    assert "lower max_steps or num_epochs" in line
    assert out.stderr.splitlines()[-1] == f"job {job_id} cancelled: {line}"
    job_dir = runs["home"] / "jobs" / job_id
    assert leftover_pids(job_dir) == []
    assert not (job_dir / "output").exists()
    assert (job_dir / "checkpoints" / "step-3" / "COMPLETE").is_file()


def test_the_job_lists_say_why_a_no_go_job_stopped(
    runs: dict, capsys: pytest.CaptureFixture[str]
) -> None:
    """A no-go job is `cancelled` with no error: `veri-tui jobs`, `veri-tui jobs ID` and the
    app's job list name the gate instead (before, its row was a bare `cancelled`)."""
    from veri_tui.app.screens.jobs import job_row
    from veri_tui.cli import main

    job_id = runs["no-go"].stdout.splitlines()[0]
    record = json.loads((runs["home"] / "jobs" / job_id / "job.json").read_text())
    assert main(["jobs"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(job_id))
    assert row.split()[1] == "cancelled" and row.endswith("canary no-go")
    assert main(["jobs", job_id]) == 0
    assert record["canary"]["line"] in capsys.readouterr().out.splitlines()
    assert job_row(record)[1] == "cancelled (canary no-go)"


def test_the_canaries_calibrate_the_cpu_entry(runs: dict) -> None:
    from veri_tui.launch import jobs
    from veri_tui.plan.calibration import calibration_path

    jobs.list_jobs()  # reading the jobs folds them
    entry = json.loads(calibration_path().read_text())["entries"]["cpu@local"]
    canaries = [r for r in entry["runs"] if r.get("source") == "canary"]
    assert len(canaries) == 2 and all("overhead_bytes" in r for r in canaries)
    assert entry["overhead_bytes"] > 0 and entry["activation"] is not None
