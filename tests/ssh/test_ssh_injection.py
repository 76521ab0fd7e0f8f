"""No user string is ever interpreted by the remote shell: quotes, spaces, $(...), backticks,
`;` and newlines in arguments, paths, dataset and output names arrive literally, and the canary
file those strings would create is never created."""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

import pytest
from ssh_helpers import cli

from veri_tui.jobfolder.contract.procs import job_processes
from veri_tui.launch.job_datasets import BUNDLED_DATASETS
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.remote_model import locate_model
from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

EVIL = [
    'it\'s "quoted" and  spaced',
    "$(touch CANARY)",
    "`touch CANARY`",
    "a; touch CANARY",
    "first line\nsecond $(touch CANARY) line",
    "$HOME ${PATH} * ? [a] ~ & | > < \\ ! && touch CANARY",
]


def _canaries(*roots: Path) -> list[Path]:
    found = [p for r in roots if r.is_dir() for p in r.rglob("CANARY")]
    return found + [p for p in (Path.home() / "CANARY", Path.cwd() / "CANARY") if p.exists()]


def test_arguments_arrive_literally(ssh_env, tmp_path: Path) -> None:
    conn = Connection.open(ssh_env.alias)
    for text in EVIL:
        assert conn.run(["printf", "%s", text]).stdout == text.encode()
    code = "import sys; print(repr(sys.argv[1:]))"
    assert conn.run([sys.executable, "-c", code, *EVIL]).text.strip() == repr(EVIL)
    for text in EVIL:  # model ids are looked up over SFTP, never through a shell
        assert locate_model(conn.sftp(), f"org/{text}", str(tmp_path)) is None
    conn.close()
    assert _canaries(tmp_path) == []


def test_cli_job_with_hostile_paths_over_ssh(
    ssh_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """launch / logs / jobs / cancel through the CLI and the facade, hostile names throughout."""
    name = "x 'q' \"d\" $(touch CANARY) `touch CANARY`; touch CANARY\nnl"
    monkeypatch.setenv("VERI_REMOTE_HOME", str(tmp_path / f"remote {name}"))
    dataset = tmp_path / f"data {name}.jsonl"
    shutil.copy(BUNDLED_DATASETS["sft_text"], dataset)
    output = tmp_path / f"out {name}"
    model = str(bundled_tiny_model())
    job_args = ["--model", model, "--gpu-count", "1", "--dataset", str(dataset)]
    job_args += ["--output", str(output), "--set", "max_steps=100000"]
    out = cli("launch", "--host", ssh_env.alias, *job_args)
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    deadline = time.monotonic() + 60
    while "plan: dp=1" not in (log := cli("logs", job_id).stdout):
        assert time.monotonic() < deadline, log
        time.sleep(0.5)
    listed = json.loads(cli("jobs", "--json").stdout)
    mine = [r for r in listed if r["job_id"] == job_id]
    assert mine and mine[0]["host"] == ssh_env.alias and mine[0]["status"] == "running"
    spec = mine[0]["spec"]
    assert spec["output_dir"] == str(output)
    assert Path(spec["dataset"]).read_bytes() == dataset.read_bytes()
    assert Path(spec["dataset"]).name == dataset.name
    cancel = cli("cancel", job_id)
    assert cancel.stdout.strip() == f"job {job_id} cancelled", cancel.stderr
    follow = cli("logs", job_id, "-f")  # ends at once: the job is over
    assert follow.returncode == 0 and follow.stdout.startswith("model: ")
    job_json = Path(spec["dataset"]).parent.parent / "job.json"
    assert job_processes(job_json) == []  # every rank ended (same machine as the 'remote')
    assert _canaries(tmp_path) == []
