"""`python -m veri_tui.jobfolder.supervise --job <job_dir>/job.json`: the supervisor's command,
as launchers and every batch script name it (supervisor.py is the supervisor)."""

from veri_tui.jobfolder.supervise.supervisor import main

if __name__ == "__main__":
    raise SystemExit(main())
