"""A machine reached over SSH as a `Host` (veri_tui/launch/host.py): its Machine is
`SshMachine` (machine.py: a channel per command, SFTP, `tail -F`).

A job's folder on the host holds what it needs there: the packages the host runs
(`pkg/veri_tui/`, on PYTHONPATH), the dataset (`data/`), and the bundled model when no
--model was given (`model/`). The facts come from one probe script (preflight.py); the
model is found and counted over SFTP.
"""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import TYPE_CHECKING, Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.data.source import files_of
from veri_tui.launch.host import HostFacts, Row, capacity_rows
from veri_tui.launch.job_datasets import JobData, local_data
from veri_tui.launch.ssh import files
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.machine import SshMachine
from veri_tui.launch.ssh.preflight import run_preflight
from veri_tui.launch.ssh.remote_model import expand_home

if TYPE_CHECKING:
    from veri_tui.plan import JobConfig, PlanRecord
    from veri_tui.plan.disk import DiskEstimate


class SshHost:
    """An SSH destination holding job folders: its machine (`SshMachine`) and the job's steps
    there."""

    kind = "ssh"

    def __init__(self, name: str, *, trust: str | None = None, conn: Connection | None = None,
                 python: str | None = None) -> None:  # fmt: skip
        self.machine = SshMachine(name, trust=trust, conn=conn, python=python)
        self.label: str | None = name
        self.where = name
        self._code_checked: set[str] = set()

    @classmethod
    def open(cls, name: str, *, trust: str | None = None) -> SshHost:
        """Connect now (a host that cannot be reached raises VeriError here)."""
        return cls(name, trust=trust, conn=Connection.open(name, trust=trust))

    # -- the job's steps ---------------------------------------------------------------------

    def probe(self, job: JobConfig, dataset_bytes: int) -> HostFacts:
        """The host's facts for ``job``: its model, its gpu_count, and whether the artifact is
        a whole model (a full fine-tune: the disk must hold it) or an adapter."""
        return run_preflight(
            self.machine.conn,
            model=job.model,
            gpu_count=int(job.gpu_count),
            full_finetune=not job.hyperparameters.lora_rank,
            dataset_bytes=dataset_bytes,
            report_to=job.hyperparameters.report_to,
        )

    def plan(
        self, job: JobConfig, facts: HostFacts, given: PlanRecord | None = None
    ) -> tuple[JobConfig, PlanRecord]:
        """The job as it will run on the host (its detected GPU with its real memory) and its
        plan, from the model's headers read there, calibrated by this host's runs; a plan made
        elsewhere (``given``) is not used."""
        from veri_tui.plan import plan_job, read_model_info

        if facts.gpu_name:
            job = job.copy_with(update={"gpu": facts.gpu_name})
        info = facts.model_info if facts.model_info is not None else read_model_info(None)
        return job, plan_job(job, info, host=facts.host)

    def output_for(self, job: JobConfig, facts: HostFacts) -> JobConfig:
        """The output dir is a path on the host: `~` expanded there, refused when not empty."""
        if not job.output:
            return job
        output = expand_home(job.output, facts.home)
        if not output.startswith("/"):
            raise VeriError(f"{job.output}: give an absolute or ~/ path on {facts.host}",
                            key="output")  # fmt: skip
        machine = self.machine
        if machine.exists(output) and (not machine.is_dir(output) or machine.listdir(output)):
            raise VeriError(f"{output} already exists on {facts.host} and is not empty; "
                            "choose another --output", key="output")  # fmt: skip
        return job.copy_with(update={"output": output})

    def job_paths(self, job: JobConfig, plan: PlanRecord, job_dir: str, facts: HostFacts
                  ) -> tuple[str, JobData, str, str | None]:  # fmt: skip
        """(model path, datasets, output dir, the model's name) in the host's job folder."""
        model = facts.model_path or posixpath.join(job_dir, "model")
        dataset = uploaded(local_data(job), job_dir)
        output = job.output or posixpath.join(job_dir, "output")
        return model, dataset, output, job.model or "tiny-model (bundled)"

    def stage(self, job: JobConfig, tmp: str) -> None:
        """Copy into the folder being built what the job needs on the host."""
        sftp = self.machine.conn.sftp()
        files.upload_code(sftp, posixpath.join(tmp, "pkg"))
        here = local_data(job)
        there = uploaded(here, tmp)
        for src, dst in zip((*here.train, *here.eval), (*there.train, *there.eval), strict=True):
            root = Path(src.path)
            for f in files_of(root):  # a file, or a folder's files (a Hub snapshot's too)
                target = posixpath.join(dst.path, *f.relative_to(root).parts)
                files.makedirs(sftp, posixpath.dirname(target))
                files.upload_file(sftp, f, target)
        if not job.model:
            from veri_tui.plan.model_sources import bundled_tiny_model

            files.makedirs(sftp, posixpath.join(tmp, "model"))
            for part in sorted(bundled_tiny_model().iterdir()):
                if part.is_file():
                    files.upload_file(sftp, part, posixpath.join(tmp, "model", part.name))

    def path_rows(self, job: JobConfig, paths: tuple[str, JobData, str, str | None] | None,
                  label: str) -> list[Row]:  # fmt: skip
        """The output dir on the host, when one was given (it was checked there)."""
        return [("output", True, f"{job.output} on {label}")] if job.output else []

    def capacity(self, facts: HostFacts, plan: PlanRecord, disk: DiskEstimate,
                 output: str | None, label: str
                 ) -> tuple[list[Row], list[Refusal]]:  # fmt: skip
        """Host memory, then disk, against this host."""
        return capacity_rows(self, facts, plan, disk, output, label)

    def tail_rows(self) -> list[Row]:
        return []  # torch is one of the probe's facts (a problem when missing)

    def pythonpath(self, job_dir: str) -> list[str]:
        """`env PYTHONPATH=<job>/pkg`: the job's uploaded packages. A folder uploaded by a
        release before the packages moved into veri_tui holds them as `pkg/trainer` (and
        `pkg/jobfolder`): it gets this release's `pkg/veri_tui/` now, once per folder, since
        every command this release runs there names the new modules."""
        pkg = posixpath.join(job_dir, "pkg")
        if job_dir not in self._code_checked:
            sftp = self.machine.conn.sftp()
            new = f"{pkg}/veri_tui/jobfolder/__init__.py"
            if files.exists(sftp, pkg) and not files.exists(sftp, new):
                files.upload_code(sftp, pkg)
            self._code_checked.add(job_dir)
        return ["env", f"PYTHONPATH={pkg}"]

    def trainer_path(self, facts: HostFacts) -> str:
        """The trainer package uploaded to the host's probe folder (the fleet probe's)."""
        pkg = posixpath.join(facts.veri_home, "probe", "pkg")
        files.upload_code(self.machine.conn.sftp(), pkg, ("veri_tui.trainer",))
        return pkg


def uploaded(data: JobData, job_dir: str) -> JobData:
    """The datasets as the job folder on a host holds them: source k (the mixture's, then
    the eval sources) in `data/<k>/` under its own name."""

    def moved(k: int, src: Any) -> Any:
        return src.moved(posixpath.join(job_dir, "data", str(k), Path(src.path).name))

    train = tuple(moved(k, s) for k, s in enumerate(data.train))
    return JobData(train, tuple(moved(len(train) + k, s) for k, s in enumerate(data.eval)))
