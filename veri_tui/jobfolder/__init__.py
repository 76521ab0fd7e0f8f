"""The job folder: one job's record, files and processes, and the supervisor that runs it.

Its rooms, each a sub-package importing only the rooms below it (an import-linter layers
contract): `contract/` (the folder's layout, record, statuses, writer, lost rule, attempts,
checkpoint index: what both sides read and write), `knobs/` (the knob schema), `data/` (the
dataset readers), `failures/` (why a job failed), `canary/` and `probe/` (their rules), and
`supervise/` (the supervisor, its launchers and watchdog: `python -m
veri_tui.jobfolder.supervise`); the command on top, `python -m veri_tui.jobfolder`.

Standard library only. The launcher side (veri_tui) imports it to read and change job
folders; it is uploaded with the trainer to every host a job runs on, where the supervisor
(`python -m veri_tui.jobfolder.supervise`) and `python -m veri_tui.jobfolder status|cancel|resume`
run. The torch rank program (veri_tui/trainer/) imports it for the paths, the writer, the failure
rules and the error types it raises. It imports neither torch nor veri_tui (an import-linter
contract in .ci/run); docs/architecture.md draws where it sits.
"""
