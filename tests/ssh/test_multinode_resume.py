"""Retries and resume of a 2-node job, over two real sshd servers (one CPU process per node,
the tiny model under FSDP, a checkpoint every 10 steps), in one job's life:

1. `veri-tui launch --host a --host b --set max_restarts=1 --wait`: node 1's rank is
   SIGKILLed at step 25 (VERI_FAULT, set by the remote python wrapper for node 1's first two
   supervisors), after step-20 was committed on both nodes. The watcher (`--wait`) sees the
   platform failure and restarts both nodes from step-20; the same kill ends that attempt
   too, and with no restart left the job fails (exit 1).
2. node 1's part of step-20 is damaged; the checkpoint check over SSH (on each node, or in
   one place: both 'nodes' are this machine, so their folders share a filesystem) skips
   step-20 naming node 1; `--gpu-count 1` is refused.
3. `veri-tui resume JOB --wait` starts attempt 3 on both nodes from step-10 and succeeds:
   each step once in metrics.jsonl, every loss equal to an uninterrupted run's within
   tests/launch/test_resume.py's tolerance (0.1%).

Two fast tests need no server: the common step and what a node lacks, and when a retry is due.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from multinode_helpers import losses, two_node_env
from ssh_helpers import cli, script

from veri_tui.launch.checkpoints import NodeCheck, choose_step, common_steps
from veri_tui.launch.nodes import shared_storage
from veri_tui.launch.registry import RegistryEntry
from veri_tui.launch.restart import layout_refusal, retry_due
from veri_tui.launch.ssh.host import SshHost
from veri_tui.plan.model_sources import bundled_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from launch_helpers import leftover_pids, wait_for  # noqa: E402

STEPS = 30
SETS = [f"max_steps={STEPS}", "checkpoint_steps=10", "max_seq_length=64", "zero_stage=3"]
JOB = ["--model", str(bundled_tiny_model())] + [a for s in SETS for a in ("--set", s)]


def close(a: float, b: float, rel: float) -> bool:
    return abs(a - b) <= rel * abs(b)


def _fault_python(folder: Path) -> str:
    """This interpreter, exporting VERI_FAULT=kill:1:25 for node 1's first two supervisors
    (their ranks inherit it through torchrun); every other run is plain."""
    count = folder / "node1-starts"
    return script(folder / "python-fault", f"""#!/bin/sh
case "$*" in *veri_tui.jobfolder.supervise*-node1/job.json*)
  n=$(cat '{count}' 2>/dev/null || echo 0)
  if [ "$n" -lt 2 ]; then echo $((n + 1)) > '{count}'; export VERI_FAULT=kill:1:25; fi;;
esac
exec '{sys.executable}' "$@"
""")  # fmt: skip


def test_common_steps_name_what_a_node_lacks() -> None:
    assert common_steps([[30, 20, 10], [20, 10]]) == (
        [20, 10],
        ["step-30: committed on node 0 only"],
    )
    assert common_steps([[20], [10]]) == ([], ["step-20: committed on node 0 only",
                                               "step-10: committed on node 1 only"])  # fmt: skip
    assert common_steps([[], []]) == ([], [])


def test_a_retry_is_due_after_a_platform_failure_with_restarts_left() -> None:
    entry = RegistryEntry("j", "a", "/x", "1", "python3", {}, [])
    spec = {"nnodes": 2, "gpu_count": 2, "hyperparameters": {"max_restarts": 1}}
    lost = {"code": "RANK_LOST", "attribution": "platform"}
    rec = {"job_id": "j", "status": "failed", "error": lost, "spec": spec, "attempts": [{}]}
    assert retry_due(rec, entry)
    assert not retry_due({**rec, "attempts": [{}, {"retry": True}]}, entry)  # none left
    assert retry_due({**rec, "attempts": [{}, {"retry": True}, {}]}, entry)  # a resume: anew
    customer = {"code": "DATA_ERROR", "attribution": "customer"}
    assert not retry_due({**rec, "error": customer}, entry)
    assert not retry_due({**rec, "status": "running"}, entry)  # a node has not ended yet
    entry.retry_refused = "1"  # this attempt's retry could not start: not again
    assert not retry_due(rec, entry)
    assert layout_refusal(rec, None, []) is None and layout_refusal(rec, 2, []) is None
    assert layout_refusal(rec, 1, []).errors[0].key == "gpu_count"
    assert layout_refusal(rec, None, ["max_steps=9"]).errors[0].key == "max_steps"


@pytest.mark.slow
@pytest.mark.trial  # a retry, then a resume, across two nodes: about 75 s (docs/trials.md)
@pytest.mark.timeout(600)
def test_retry_then_resume_across_two_nodes(sshd, sshd2, tmp_path: Path, monkeypatch) -> None:
    env = two_node_env(sshd, sshd2, tmp_path)
    env["VERI_REMOTE_PYTHON"] = _fault_python(tmp_path)
    reference = cli("launch", "--gpu-count", "2", "--wait", *JOB, env=env, timeout=240)
    assert reference.returncode == 0, reference.stderr[-3000:]
    expected = losses(tmp_path / "local-veri" / "jobs" / reference.stdout.splitlines()[0])
    assert len(expected) == STEPS

    t0 = time.monotonic()
    hosts = ["--host", sshd.alias, "--host", sshd2.alias, "--gpu-count", "2"]  # 2 x 1
    out = cli("launch", *hosts, "--set", "max_restarts=1", "--wait", *JOB, env=env, timeout=300)
    print(f"launch --wait, 2 attempts each killed at step 25: {time.monotonic() - t0:.1f} s")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    job_id = out.stdout.splitlines()[0]
    lines = out.stdout.splitlines()
    assert "retry: RANK_LOST (platform) ended the attempt; restart 1 of 1 (max_restarts)" in lines
    assert "resume: attempt 2 from step-20 (verified on 2 nodes)" in lines
    assert "resume: the 2 node folders are on one shared filesystem: checked from node 0 " \
           f"({sshd.alias})" in lines  # fmt: skip
    assert f"job {job_id} failed: RANK_LOST (platform): rank 1/2 (node 1" in out.stderr
    jobs = tmp_path / "remote-veri" / "jobs"
    dirs = [jobs / f"{job_id}-node0", jobs / f"{job_id}-node1"]
    listed = json.loads(cli("jobs", "--json", env=env).stdout)
    (rec,) = [r for r in listed if r["job_id"] == job_id]  # gathered from both nodes
    assert [(a["status"], a["resumed_from_step"], a.get("retry")) for a in rec["attempts"]] == [
        ("failed", None, None),
        ("failed", 20, True),
    ]
    assert rec["attempts"][1]["error"]["code"] == "RANK_LOST"
    first, second = rec["attempts"]
    gap = second["started_s"] - first["started_s"] - first["wall_s"]
    print(f"the retry's attempt began {gap:.1f} s after the first attempt's end was recorded")
    assert sorted(p.name for p in (dirs[1] / "checkpoints").iterdir()) == ["step-10", "step-20"]
    assert (dirs[1] / "checkpoints" / "step-20" / "__1.metadata").is_file()  # node 1's own

    # Node 1's part of step-20 damaged: one byte, same size (only the sha256 catches it).
    data = dirs[1] / "checkpoints" / "step-20" / "__1_0.distcp"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    conns = [SshHost.open(sshd.alias), SshHost.open(sshd2.alias)]
    try:
        assert shared_storage(conns, [str(jobs), str(jobs)])
        for shared in (False, True):  # asked of each node, or all on node 0
            step, skipped = choose_step(NodeCheck(conns, [str(d) for d in dirs], shared))
            assert step == 10, skipped
            assert len(skipped) == 1 and skipped[0].startswith(
                f"resume: skipped step-20: node 1: {data}: sha256 differs"
            ), skipped
    finally:
        for conn in conns:
            conn.machine.close()

    refused = cli("resume", job_id, "--gpu-count", "1", env=env)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith(f"error: gpu_count: {job_id} runs on 2 nodes x 1 GPU; ")
    assert "Traceback" not in refused.stderr

    t0 = time.monotonic()
    out = cli("resume", job_id, "--wait", env=env, timeout=300)
    print(f"resume --wait on 2 nodes: {time.monotonic() - t0:.1f} s")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert lines[0] == f"job {job_id} resumed: attempt 3"
    assert any(
        ln.startswith(f"resume: skipped step-20: node 1: {data}: sha256 differs") for ln in lines
    ), lines
    assert "resume: attempt 3 from step-10 (verified on 2 nodes)" in lines
    rec = json.loads((dirs[0] / "job.json").read_text())
    assert rec["status"] == "succeeded" and rec["error"] is None
    assert [a["resumed_from_step"] for a in rec["attempts"]] == [None, 20, 10]
    assert rec["attempts"][2]["status"] == "succeeded" and not rec["attempts"][2].get("retry")
    got = [json.loads(ln) for ln in (dirs[0] / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in got] == list(range(1, STEPS + 1))  # each step once
    print(f"last loss after retry + resume: {got[-1]['loss']} vs uninterrupted {expected[-1]}")
    assert all(close(g["loss"], e, 1e-3) for g, e in zip(got, expected, strict=True))
    listed = json.loads(cli("jobs", "--json", env=env).stdout)
    mine = [r for r in listed if r["job_id"] == job_id]
    assert [r["status"] for r in mine] == ["succeeded"] and len(mine[0]["attempts"]) == 3
    wait_for(lambda: not leftover_pids(dirs[0]) and not leftover_pids(dirs[1]), 30,
             "every process of both nodes to end")  # fmt: skip
