"""The fleet probe: collective bus bandwidth and GPU health of a job's nodes, before the job.

`veri-tui probe` and the launch preflight run it: fleet.py on this machine or SSH hosts,
allocation.py inside a Slurm allocation; the rank programs are the trainer's
(veri_tui/trainer/probe.py, veri_tui/trainer/gpuhealth.py); bandwidth.py and health.py judge
what they measured, report.py keeps it (the cache plans read, a job's record). docs/probe.md.
"""
