"""The start of an attempt: what the supervisor does before each run of torchrun.

A first attempt starts from scratch. A later one (`veri-tui resume`, a platform retry, or a Slurm
job started again after a requeue) archives the previous attempt's files
(veri_tui/jobfolder/contract/attempts.py), removes partial writes, rewinds metrics.jsonl and starts
from the newest verified checkpoint (veri_tui/jobfolder/contract/ckptindex.py), or from the step a
multi-node launcher chose (`resume_choice`), saying which in the log; the chosen folder becomes the
spec's `resume_from`. docs/jobs.md, Resume and retries.

Stdlib only, like the supervisor (veri_tui/jobfolder/supervise.py) that calls it.
"""

from __future__ import annotations

from pathlib import Path

from veri_tui.jobfolder.contract import attempts, ckptindex
from veri_tui.jobfolder.contract.atomic import modify_job
from veri_tui.jobfolder.contract.layout import JobLayout
from veri_tui.jobfolder.contract.record import JobRecord, read_job
from veri_tui.jobfolder.contract.status import has_ended
from veri_tui.jobfolder.failures import failures


def begin_attempt(job_path: Path) -> JobRecord | None:
    """Prepare and record the next attempt; None when the job already has an outcome.

    A first attempt starts from scratch. A later one (a resume, or a retry) archives the
    previous attempt's files, removes partial writes, rewinds metrics.jsonl and starts
    from the newest verified checkpoint, saying which in the log.
    """
    job_dir = Path(job_path).parent
    layout = JobLayout(job_dir)
    record = read_job(job_path)
    if has_ended(record):
        return None
    spec = record["spec"]
    number = len(attempts.attempts_of(record)) + 1
    lines: list[str] = []
    stale = ckptindex.stale_writes(job_dir, spec.get("output_dir"))
    attempts.remove_stale(stale)
    lines += [f"resume: removed the partial write {p}" for p in stale]
    step, path = None, None
    pinned = record.get("resume_choice")  # a multi-node resume: the launcher chose
    if number > 1:
        attempts.archive_attempt(job_dir, number - 1)
        root = layout.checkpoints
        if pinned is not None:
            choice, newer = ckptindex.pinned(root, pinned.get("step"))
            attempts.remove_stale(newer)
            lines += list(pinned.get("lines") or [])
        else:
            choice = ckptindex.choose(root)
            # A skipped step is unusable, and the new attempt saves that step again (a
            # checkpoint is never written into an existing folder): it goes.
            attempts.remove_stale([root / f"step-{n}" for n, _ in choice.skipped])
            lines += [f"resume: skipped step-{n}: {why}; removed" for n, why in choice.skipped]
        step, path = choice.step, choice.path
        where = f"step-{step} (verified)" if step is not None else "step 0 (no checkpoint)"
        lines.append(f"resume: attempt {number} from {(pinned or {}).get('where', where)}")
        attempts.rewind_metrics(job_dir, step or 0)
    if lines:
        failures.append_lines(layout.log, lines)

    def begin(rec: JobRecord) -> None:
        # Under the job lock: a cancel recorded meanwhile must not become `running`.
        if not has_ended(rec):
            rec["spec"]["resume_from"] = str(path) if path is not None else None
            attempts.open_attempt(rec, step, retry=bool((pinned or {}).get("retry")))
            rec.pop("resume_choice", None)  # this attempt's only

    record = modify_job(job_path, begin)
    return None if has_ended(record) else record
