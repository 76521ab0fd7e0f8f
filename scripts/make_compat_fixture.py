"""Write tests/fixtures/compat/: job folders made by the veri-tui checked out here, kept so a
later release proves it still reads, cancels and resumes them (tests/launch/test_compat.py).

    python scripts/make_compat_fixture.py            # needs /usr/sbin/sshd for the 2-node job

Three jobs of the bundled tiny model (LoRA rank 2, so the checkpoints stay small):
- `local/jobs/<id>`, "succeeded": a 2-rank local job that succeeded (its measurements and
  artifact);
- `local/jobs/<id>`, "cancelled": a 2-rank job cancelled once a checkpoint (every 2
  steps, the newest one kept) was committed: resumable from it;
- `cli/`: `veri-tui jobs` and `veri-tui jobs ID` as this release printed them;
- `multinode/`: a 2-node job (one rank each, two sshd servers on 127.0.0.1) that succeeded:
  this machine's registry entry (`local/remote/<id>.json`) and each node's job.json and
  log.txt (`remote/jobs/<id>-node<k>/`); the uploaded package and the model copy are left out.

Absolute paths are written as `@VERI_HOME@` (the local $VERI_HOME), `@REMOTE_HOME@` (the
nodes' $VERI_REMOTE_HOME), `@PYTHON@` (their interpreter) and `@REPO@` (this checkout);
the test puts its own back.
`made_by.json` names each job's id and the commit that wrote them (`code_commit`: the last
one that changed veri_tui/ or veri_tui/trainer/). Bulky per-attempt files
(torch elastic's folder, torchrun.log) are dropped; every file kept is as the release wrote it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "tests" / "fixtures" / "compat"
JOB = ["--gpu-count", "2", "--set", "lora_rank=2", "--set", "max_seq_length=32"]
DROP = ("elastic", "torchrun.log", "pkg", "model", "data", "tokens", "progress")


def cli(env: dict[str, str], *args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "veri_tui", *args], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        sys.exit(f"veri-tui {' '.join(args)} failed:\n{out.stdout}\n{out.stderr}")
    return out.stdout


def wait_for(pred, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.2)
    sys.exit(f"timed out waiting for {what}")


def local_jobs(home: Path, env: dict[str, str]) -> dict[str, str]:
    ok = cli(env, "launch", *JOB, "--set", "max_steps=4", "--wait").split()[0]
    job = cli(env, "launch", *JOB, "--set", "max_steps=400", "--set", "checkpoint_steps=2",
               "--set", "keep_checkpoints=1")  # fmt: skip
    job_id = job.split()[0]
    folder = home / "jobs" / job_id
    ckpts = folder / "checkpoints"
    wait_for(lambda: any(ckpts.glob("step-*/COMPLETE")), 300, "a committed checkpoint")
    cli(env, "cancel", job_id)
    return {"succeeded": ok, "cancelled": job_id}


def multinode_job(work: Path) -> tuple[str, str]:
    """The 2-node job's id, and `veri-tui jobs ID` as this release prints it (over SSH)."""
    work.mkdir(parents=True)
    sys.path.insert(0, str(REPO / "tests" / "ssh"))
    import conftest  # the test sshd: keys, config, server on a free loopback port

    class Factory:
        def mktemp(self, name: str) -> Path:
            return Path(tempfile.mkdtemp(prefix=name, dir=work))

    servers = [conftest._serve(Factory(), alias) for alias in ("veri-test", "veri-test-2")]
    sshds = [next(s) for s in servers]
    config = work / "ssh_config"
    config.write_text("".join(s.ssh_config.read_text() for s in sshds))
    env = dict(os.environ, VERI_SSH_CONFIG=str(config), VERI_REMOTE_PYTHON=sys.executable,
               VERI_REMOTE_HOME=str(work / "remote"), VERI_HOME=str(work / "local"))  # fmt: skip
    env.pop("SSH_AUTH_SOCK", None)
    try:
        hosts = ["--host", "veri-test", "--host", "veri-test-2"]
        job_id = cli(env, "launch", *hosts, *JOB[2:], "--set", "max_steps=2", "--wait").split()[0]
        shown = cli(env, "jobs", job_id)
    finally:
        for sshd in sshds:
            sshd.proc.send_signal(signal.SIGTERM)
            sshd.proc.wait(timeout=10)
    return job_id, shown


def copy_clean(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest, ignore=lambda d, names: [n for n in names if n in DROP])


def relocate(root: Path, places: dict[str, str]) -> None:
    """Absolute paths become placeholders; a path left anywhere (even in a binary) fails."""
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        data = path.read_bytes()
        for where, mark in places.items():
            data = data.replace(where.encode(), mark.encode())
        path.write_bytes(data)
        for where in places:
            if where.encode() in data:
                sys.exit(f"{path}: still holds {where}")


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    with tempfile.TemporaryDirectory(prefix="veri-compat-") as tmp:
        work = Path(tmp).resolve()
        home = work / "local-home"
        env = dict(os.environ, VERI_HOME=str(home))
        ids = local_jobs(home, env)
        copy_clean(home / "jobs", OUT / "local" / "jobs")
        ids["multinode"], shown = multinode_job(work / "mn")
        # What this release prints for them: the listing (the ended 2-node job is listed
        # from its registry entry, no host asked) and each job's own view.
        cli_out = OUT / "cli"
        cli_out.mkdir()
        (cli_out / f"jobs-{ids['multinode']}.txt").write_text(shown)
        shutil.copytree(work / "mn" / "local" / "remote", home / "remote")
        (cli_out / "jobs.txt").write_text(cli(env, "jobs"))
        for job_id in (ids["succeeded"], ids["cancelled"]):
            (cli_out / f"jobs-{job_id}.txt").write_text(cli(env, "jobs", job_id))
        copy_clean(work / "mn" / "local" / "remote", OUT / "multinode" / "local" / "remote")
        copy_clean(work / "mn" / "remote" / "jobs", OUT / "multinode" / "remote" / "jobs")
        for node in (OUT / "multinode" / "remote" / "jobs").iterdir():
            for extra in [p for p in node.iterdir() if p.name not in ("job.json", "log.txt")]:
                shutil.rmtree(extra) if extra.is_dir() else extra.unlink()
        relocate(OUT / "local", {str(home): "@VERI_HOME@", str(REPO): "@REPO@"})
        relocate(OUT / "multinode", {str(work / "mn" / "remote"): "@REMOTE_HOME@",
                                     str(work / "mn" / "local"): "@VERI_HOME@",
                                     sys.executable: "@PYTHON@", str(REPO): "@REPO@"})  # fmt: skip
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()  # fmt: skip
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--", "veri_tui"],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    code = subprocess.run(["git", "-C", str(REPO), "log", "-1", "--format=%H", "--", "veri_tui"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    made = {
        "jobs": ids,
        "commit": commit,
        "code_commit": code,
        "clean": not dirty,
        "python": sys.version.split()[0],
    }
    (OUT / "made_by.json").write_text(json.dumps(made, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({size / 1024:.0f} KiB) from {commit}")


if __name__ == "__main__":
    main()
