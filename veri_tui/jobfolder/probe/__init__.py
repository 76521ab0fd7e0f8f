"""The fleet probe's rules: bus bandwidth (`probe_bandwidth.py`), GPU health
(`probe_health.py`), their verdict on each node (`probe_verdict.py`), and a Slurm batch job's
probe of its own allocation (`slurmprobe.py`), docs/probe.md.
"""
