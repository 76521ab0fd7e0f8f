"""The Slurm target: a job submitted with sbatch from a login node (an SSH host, or this
machine for `--slurm local`), its supervisor the batch job (docs/slurm.md).

- options.py: the user's Slurm options (`--slurm`, `--partition`, ..., veri.toml's `[slurm]`);
- partition.py: a partition's nodes, GPU type and count, read from the controller;
- script.py: the batch script (`<job_dir>/sbatch.sh`);
- states.py: a Slurm job's state, and what it means for the job record;
- host.py: `SlurmHost`, the Host (veri_tui/launch/host.py) whose supervisor is a batch job.

Stdlib only, except host.py's SSH flavour (paramiko, imported when a login node is used).
"""
