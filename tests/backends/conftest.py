"""The Backends the conformance suite runs (test_backend_conformance.py), each as a fixture
parameter: where a job goes (the facade's `host`), and the environment that reaches it.

- `local`: this machine (`direct` over one local host);
- `ssh`: the session's sshd (`direct` over one SSH host);
- `two-host`: the session's two sshd servers (`direct` over two SSH hosts, one node each);
- `slurm`: the session's test cluster, sbatch on this machine (`--slurm local`);
- a plugin's, where tests/backends/<name>/conformance.py says how to reach it.

Every "remote" is this machine in tmp folders, so a test reads a job's folders and pids
directly. The session's servers start only when a backend asks for them (a run of the local
backend alone starts neither sshd nor Slurm).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest
from support.backends import BACKENDS, Backend, backend_env

from veri_tui.jobfolder.contract.procs import job_processes


@pytest.fixture(scope="module", params=BACKENDS)
def backend(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Backend]:
    """Each backend in turn, its environment set for the module's tests of it; every process
    and Slurm job its jobs left is ended afterwards."""
    root = tmp_path_factory.mktemp(f"backend-{request.param}")
    where, env, cluster, teardown = backend_env(request.param, request, root)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        for key in ("SSH_AUTH_SOCK", "VERI_KNOWN_HOSTS", "VERI_FAULT"):
            mp.delenv(key, raising=False)
        yield Backend(request.param, where, root, cluster, env)
        if cluster is not None:
            cluster.cancel_all()
        for job_json in root.glob("**/jobs/*/job.json"):
            for pid in job_processes(job_json):
                os.kill(pid, signal.SIGKILL)
        teardown()
