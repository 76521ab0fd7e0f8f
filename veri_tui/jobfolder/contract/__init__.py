"""The job folder's contract: what both sides read and write in a job's folder, and how.

`layout.py` (every name once, `veri_home()`), `record.py` (job.json, every key typed; the
`scheduler` block; the plan line), `status.py` (`Status`, `FailureCode`, `Attribution`),
`errors.py` (the exception types a job raises on purpose), `atomic.py` (the one atomic
writer, job.json's lock), `lost.py` (the one lost rule), `procs.py` (pids, the job's
processes), `attempts.py` (attempts and a resume's preparation), `ckptindex.py` and
`manifest.py` (the checkpoint index and its verification), `stopping.py` (the stop, cancel
and peer-failure files). The room every other room stands on: it imports nothing of theirs.
"""
