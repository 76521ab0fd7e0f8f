"""The one write a reader of a job makes: `settle(target, record)`, on a change it observed.

A read of a job (its backend's `state`) writes nothing. What the read showed is kept here, by
whoever follows the job (the facade's `JobHandle.poll`: the app's monitor, `veri-tui jobs`,
a follow or a wait), once per change it saw:

- an outcome the job's scheduler reported and job.json lacks (a Slurm job that ended
  without its supervisor recording one: the controller forgets it after MinJobAge) is
  recorded on the job's host by its backend (`keep_outcome`: `python -m veri_tui.jobfolder
  close`, under the job lock, a no-op once an outcome is there);
- the registry entry's copy of the record (shown when a host cannot be reached), under the
  entry's lock, the one a multi-node resume holds (restart.py);
- a finished job, or its decided canary, folded into the calibration (calibrate.py, under
  its own lock, once).
"""

from __future__ import annotations

from veri_tui.jobfolder.contract.atomic import job_lock
from veri_tui.jobfolder.contract.record import JobRecord
from veri_tui.launch import registry
from veri_tui.launch.backends import named
from veri_tui.launch.target import JobTarget


def settle(target: JobTarget, record: JobRecord) -> None:
    """Keep what a read of ``target`` showed (see the module docstring); a host that cannot
    be reached now is asked again at the next change."""
    named(target.backend).keep_outcome(target, record)
    if target.entry is not None:
        with job_lock(registry.entry_path(target.job_id)):
            registry.remember(target, record)
    from veri_tui.launch.calibrate import fold_jobs  # no file access unless it folds

    try:
        fold_jobs([record])
    except OSError:
        pass  # a calibration file that cannot be written never hides the job
