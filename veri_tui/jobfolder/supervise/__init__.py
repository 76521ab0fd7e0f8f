"""The supervisor: `supervisor.py` (`Supervisor`, attempt after attempt; `python -m
veri_tui.jobfolder.supervise`, `__main__.py`, starts it), its launcher strategies (`launcher.py`:
`TorchrunLauncher`, `torchrun_cmd.py`; `slurmjob.py`: `SrunLauncher`, `srun_tasks.py`), the next
attempt (`nextattempt.py`), the hang watchdog (`watchdog.py`), progress marks
(`progress.py`) and the ranks' measurements (`jobstats.py`).
"""
