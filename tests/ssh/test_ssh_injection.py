"""No user string is ever interpreted by the remote shell: quotes, spaces, $(...), backticks,
`;` and newlines in arguments, paths, dataset and output names arrive literally, and the canary
file those strings would create is never created."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from trainer.supervise import job_processes
from veri_tui.launch.spec import BUNDLED_DATASETS
from veri_tui.launch.ssh import launch, target_for_job
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.preflight import run_preflight
from veri_tui.plan import load_job_config
from veri_tui.plan.sources import bundled_tiny_model

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
    pf = run_preflight(conn, model=f"org/{EVIL[1]}", gpu_count=1)
    assert [e.key for e in pf.problems] == ["model"]
    assert EVIL[1] in pf.problems[0].message
    conn.close()
    assert _canaries(tmp_path) == []


def test_job_with_hostile_paths_starts_and_cancels(
    ssh_env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "x 'q' \"d\" $(touch CANARY) `touch CANARY`; touch CANARY\nnl"
    monkeypatch.setenv("VERI_REMOTE_HOME", str(tmp_path / f"remote {name}"))
    dataset = tmp_path / f"data {name}.jsonl"
    shutil.copy(BUNDLED_DATASETS["sft_text"], dataset)
    output = tmp_path / f"out {name}"
    job = load_job_config(
        None,
        model=str(bundled_tiny_model()),
        gpu_count=1,
        dataset=str(dataset),
        output=str(output),
        sets=["max_steps=100000"],
    )
    job_id = launch(job, None, host=ssh_env.alias)
    target = target_for_job(job_id)
    assert target is not None
    lines = target.follow_log(job_id)
    assert next(lines).text.startswith("model: ")  # the job runs: the header came through
    record = target.cancel(job_id)
    assert record["status"] == "cancelled"
    spec = record["spec"]
    assert spec["output_dir"] == str(output)
    assert Path(spec["dataset"]).name == dataset.name
    assert Path(spec["dataset"]).read_bytes() == dataset.read_bytes()
    list(lines)  # the tail ends by itself once the supervisor is gone
    job_json = Path(spec["dataset"]).parent.parent / "job.json"
    assert job_processes(job_json) == []  # every rank ended (same machine as the 'remote')
    target.close()
    assert _canaries(tmp_path) == []
