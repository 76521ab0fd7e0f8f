"""A 2-node job written by an earlier release (tests/fixtures/compat, made by
scripts/make_compat_fixture.py before the job-folder refactor of issue 17) still reads
over SSH with today's code: its registry entry here and its node folders on the two test
servers give the same `veri-tui jobs ID` that release printed, and the same gathered
record (each node's folder, the job's nodes). A cancel of the ended job changes nothing.
The local folders of the fixture are tested in tests/launch/test_compat.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from multinode_helpers import two_node_env
from ssh_helpers import cli

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "launch"))
from test_compat import FIXTURE, JOBS, install, printed  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_the_old_two_node_job_reads_over_ssh_as_that_release_printed_it(
    sshd, sshd2, tmp_path: Path
) -> None:
    env = two_node_env(sshd, sshd2, tmp_path)
    remote = tmp_path / "remote-veri"
    install(Path(env["VERI_HOME"]), remote)
    job_id = JOBS["multinode"]
    out = cli("jobs", job_id, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout == printed(f"jobs-{job_id}.txt")
    record = json.loads(cli("jobs", job_id, "--json", env=env).stdout)
    assert record["status"] == "succeeded"
    assert [n["host"] for n in record["nodes"]] == [sshd.alias, sshd2.alias]
    assert record["host"] == f"{sshd.alias}, {sshd2.alias}"
    node0 = json.loads((FIXTURE / "multinode" / "remote" / "jobs" / f"{job_id}-node0" /
                        "job.json").read_text())  # fmt: skip
    assert record["attempts"] == node0["attempts"]
    before = {p: p.read_bytes() for p in remote.rglob("job.json")}
    out = cli("cancel", job_id, env=env)
    assert out.returncode == 0, out.stderr
    assert {p: p.read_bytes() for p in remote.rglob("job.json")} == before
