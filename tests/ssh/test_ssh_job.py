"""A real sft_text job over SSH on the tiny model, 2 CPU processes, against the test sshd.

The 'remote' is this machine reached through sshd, in its own folders (VERI_REMOTE_HOME), with
the remote python pointed at this interpreter. The plan header, the metrics and the success
arrive through the resumable tail, whose connection is killed (server session SIGKILLed) at
the plan line and later frozen (SIGSTOP) at the first metric line.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from veri_tui.launch.handle import JobHandle
from veri_tui.launch.jobs import launch, list_jobs
from veri_tui.launch.jobs import target_for as target_for_job
from veri_tui.plan import load_job_config, read_model_info
from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]


def test_sft_job_over_ssh_survives_killed_and_frozen_sessions(ssh_env, tmp_path: Path) -> None:
    model = bundled_tiny_model()
    job = load_job_config(
        None, model=str(model), gpu_count=2, sets=["max_steps=6", "max_seq_length=64"]
    )
    job_id = launch(job, None, host=ssh_env.alias)
    target = target_for_job(job_id)
    assert target is not None
    conn = target.nodes[0].host.machine.conn
    broken: list[float] = []
    frozen: list[int] = []
    events = []
    lines = []

    def break_session(sig: int) -> None:
        broken.append(time.monotonic())
        pids = ssh_env.signal_session(conn.transport.sock.getsockname()[1], sig)
        if sig == signal.SIGSTOP:
            frozen.extend(pids)

    try:
        for line in JobHandle(target).follow_log(0, on_reconnect=events.append):
            lines.append(line.text)
            if line.text.startswith("plan:") and not broken:
                threading.Thread(target=break_session, args=(signal.SIGKILL,)).start()
            if line.text.startswith('{"step"') and len(broken) == 1 and events:
                threading.Thread(target=break_session, args=(signal.SIGSTOP,)).start()
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
    record = JobHandle(target).wait()
    assert record["status"] == "succeeded", record
    job_dir = Path(record["spec"]["output_dir"]).parent
    remote_log = (job_dir / "log.txt").read_bytes()
    assert ("\n".join(lines) + "\n").encode() == remote_log
    assert [("frozen" in e.reason) for e in events] == [False, True]
    assert all(e.noticed_at - t < 15 for e, t in zip(events, broken, strict=True))
    plan_line = next(ln for ln in lines if ln.startswith("plan:"))
    assert "dp=2" in plan_line
    metrics = [json.loads(ln) for ln in lines if ln.startswith("{")]
    assert [m["step"] for m in metrics] == list(range(1, 7))
    assert (job_dir / "output" / "config.json").is_file()
    assert list((job_dir / "output").glob("*.safetensors"))
    # Counted remotely from the headers over SFTP: the same N as locally.
    assert f"{read_model_info(str(model)).parameter_count:,}" in "\n".join(lines)
    listed = [r for r in list_jobs() if r["job_id"] == job_id]
    assert listed and listed[0]["host"] == ssh_env.alias and listed[0]["status"] == "succeeded"
    target.close()
