"""The job folder: one job's record, files and processes, and the supervisor that runs it.

Standard library only. The launcher side (veri_tui) imports it to read and change job
folders; it is uploaded with the trainer to every host a job runs on, where the supervisor
(`python -m veri_tui.jobfolder.supervise`) and `python -m veri_tui.jobfolder status|cancel|resume`
run. The torch rank program (veri_tui/trainer/) imports it for the paths, the writer, the failure
rules and the error types it raises. It imports neither torch nor veri_tui (an import-linter
contract in .ci/run); docs/architecture.md draws where it sits.
"""
