"""The one write a reader of a job makes: `settle(target, record)`, on a change it observed.

A read of a job (target.py `get_job`) writes nothing. What the read showed is kept here, by
whoever follows the job (the facade's `JobHandle.poll`: the app's monitor, `veri-tui jobs`,
a follow or a wait), once per change it saw:

- an outcome the job's scheduler reported and job.json lacks (a Slurm job that ended
  without its supervisor recording one: the controller forgets it after MinJobAge) is
  recorded on the job's host (`python -m veri_tui.jobfolder close`, under the job lock, a no-op once
  an outcome is there);
- the registry entry's copy of the record (shown when a host cannot be reached), under the
  entry's lock, the one a multi-node resume holds (restart.py);
- a finished job, or its decided canary, folded into the calibration (calibrate.py, under
  its own lock, once).
"""

from __future__ import annotations

import json

from veri_tui.jobfolder.contract.atomic import job_lock
from veri_tui.jobfolder.contract.record import JobRecord, scheduler_of
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.launch import registry
from veri_tui.launch.host import jobfolder_argv
from veri_tui.launch.target import JobTarget


def scheduler_outcome(record: JobRecord) -> bool:
    """The read showed an outcome the job's scheduler reported (its backend's judge of a
    batch job that ended unrecorded carries the scheduler's `state`) which job.json does not
    hold yet; a lost verdict is a reader's, never written."""
    state = (scheduler_of(record) or {}).get("state")
    return has_ended(record) and state is not None and not record.get("lost")


def settle(target: JobTarget, record: JobRecord) -> None:
    """Keep what a read of ``target`` showed (see the module docstring); a host that cannot
    be reached now is asked again at the next change."""
    if len(target.nodes) == 1 and scheduler_outcome(record):
        node = target.nodes[0]
        error = record.get("error")
        more = ["--error", json.dumps(error)] if error else []
        argv = jobfolder_argv(node.host, node.job_dir, "close", node.job_file,
                              "--status", str(record.get("status")), *more)  # fmt: skip
        node.host.machine.run(argv, timeout=60)
    if target.entry is not None:
        with job_lock(registry.entry_path(target.job_id)):
            target.remember(record)
    from veri_tui.launch.calibrate import fold_jobs  # no file access unless it folds

    try:
        fold_jobs([record])
    except OSError:
        pass  # a calibration file that cannot be written never hides the job
