"""Job folders written by an earlier release (tests/fixtures/compat, made by
scripts/make_compat_fixture.py before the job-folder refactor of issue 17) still read, cancel
and resume with today's code.

The fixture holds a succeeded and a cancelled 2-rank local job (a committed checkpoint in
it) and a succeeded 2-node job's registry entry (its node folders are read over SSH in
tests/ssh/test_multinode_compat.py), plus what that release printed for them: `veri-tui jobs`
and `veri-tui jobs ID` must print the same today. The cancelled job is then resumed (a new
attempt from its checkpoint, started by today's supervisor), cancelled while it runs, and
resumed again re-planned to finish: it succeeds in the old folder.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from launch_helpers import cli, leftover_pids, wait_for

from veri_tui.jobfolder.contract.record import FORMAT, format_problem
from veri_tui.launch.spec import make_record
from veri_tui.plan import load_job_config, plan_job

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "compat"
REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-model"
MADE = json.loads((FIXTURE / "made_by.json").read_text())
JOBS = MADE["jobs"]


def install(home: Path, remote_home: Path | None = None) -> None:
    """The fixture's folders under ``home`` (and the 2-node job's under ``remote_home``),
    with this machine's paths put back for the placeholders."""
    places = {
        "@VERI_HOME@": str(home),
        "@REPO@": str(REPO),
        "@REMOTE_HOME@": str(remote_home or home / "no-remote"),
        "@PYTHON@": sys.executable,
    }
    shutil.copytree(FIXTURE / "local" / "jobs", home / "jobs")
    shutil.copytree(FIXTURE / "multinode" / "local" / "remote", home / "remote")
    if remote_home is not None:
        shutil.copytree(FIXTURE / "multinode" / "remote" / "jobs", remote_home / "jobs")
    for root in (home, remote_home) if remote_home is not None else (home,):
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                for mark, real in places.items():
                    data = data.replace(mark.encode(), real.encode())
                path.write_bytes(data)


def newest_step(job_dir: Path) -> int:
    return max(int(p.name.removeprefix("step-")) for p in (job_dir / "checkpoints").iterdir())


def printed(name: str) -> str:
    return (FIXTURE / "cli" / name).read_text()


def test_the_old_folders_read_as_that_release_printed_them(home: Path) -> None:
    install(home)
    out = cli("jobs")
    assert out.returncode == 0, out.stderr
    assert out.stdout == printed("jobs.txt")
    for job_id in (JOBS["succeeded"], JOBS["cancelled"]):
        out = cli("jobs", job_id)
        assert out.returncode == 0, out.stderr
        assert out.stdout == printed(f"jobs-{job_id}.txt")
    out = cli("jobs", "--json")
    listed = {r["job_id"]: r for r in json.loads(out.stdout)}
    assert listed[JOBS["succeeded"]]["status"] == "succeeded"
    assert listed[JOBS["multinode"]]["status"] == "succeeded"  # its registry entry


def test_today_s_folders_say_format_1_older_ones_read_as_0_a_newer_one_is_refused(
    home: Path,
) -> None:
    install(home)
    old = json.loads((home / "jobs" / JOBS["succeeded"] / "job.json").read_text())
    assert "format" not in old and format_problem(old, "job.json") is None  # format 0
    job = load_job_config(model=str(TINY))
    made = make_record(job, plan_job(job), "20261206-040000-0002", model_path=str(TINY),
                       dataset="d.jsonl", output_dir=str(home / "out"))  # fmt: skip
    assert made["format"] == FORMAT == 1
    folder = home / "jobs" / made["job_id"]
    folder.mkdir()
    (folder / "job.json").write_text(json.dumps(made))
    assert cli("jobs", made["job_id"]).returncode == 0  # today's folder reads
    (folder / "job.json").write_text(json.dumps({**made, "format": 2}))
    out = cli("jobs", made["job_id"])
    assert out.returncode == 2 and out.stderr.startswith(
        f"error: job: {folder / 'job.json'}: format 2, written by a newer veri-tui"
    )
    assert cli("jobs", JOBS["succeeded"]).stdout == printed(f"jobs-{JOBS['succeeded']}.txt")


def test_a_succeeded_old_job_is_not_resumed_and_its_cancel_changes_nothing(home: Path) -> None:
    install(home)
    job_id = JOBS["succeeded"]
    before = (home / "jobs" / job_id / "job.json").read_bytes()
    out = cli("resume", job_id)
    assert out.returncode == 2
    assert out.stderr.startswith(f"error: job: {job_id} already succeeded")
    out = cli("cancel", job_id)
    assert out.returncode == 0, out.stderr
    assert (home / "jobs" / job_id / "job.json").read_bytes() == before


@pytest.mark.slow
@pytest.mark.trial  # resume, cancel, resume: about 35 s (docs/trials.md)
@pytest.mark.timeout(240)
def test_the_old_cancelled_job_resumes_cancels_and_resumes_to_the_end(home: Path) -> None:
    install(home)
    job_id = JOBS["cancelled"]
    job_dir = home / "jobs" / job_id
    step = newest_step(job_dir)

    out = cli("resume", job_id)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"job {job_id} resumed: attempt 2\n"
    assert out.stderr.startswith(f"job {job_id} attempt 2 started detached; it runs on without")
    assert f"  follow it:  veri-tui logs {job_id} -f\n" in out.stderr
    log = job_dir / "log.txt"
    line = f"resume: attempt 2 from step-{step} (verified)"
    wait_for(lambda: line in log.read_text(), 120, line)
    wait_for(lambda: (job_dir / "metrics.jsonl").read_text().count("\n") > step, 120, "a step")
    out = cli("cancel", job_id)
    assert out.returncode == 0, out.stderr
    record = json.loads((job_dir / "job.json").read_text())
    assert record["status"] == "cancelled"
    assert leftover_pids(job_dir) == []

    again = newest_step(job_dir)  # the second attempt committed its own checkpoints
    out = cli("resume", job_id, "--set", f"max_steps={again + 4}", "--wait", timeout=200)
    assert out.returncode == 0, out.stderr + out.stdout
    record = json.loads((job_dir / "job.json").read_text())
    assert record["status"] == "succeeded"
    assert [a["status"] for a in record["attempts"]] == ["cancelled", "cancelled", "succeeded"]
    steps = [json.loads(ln)["step"] for ln in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, again + 5))
    assert f"resume: attempt 3 from step-{again} (verified)" in (job_dir / "log.txt").read_text()
    assert (Path(record["spec"]["output_dir"]) / "adapter_model.safetensors").is_file()
    assert leftover_pids(job_dir) == []
