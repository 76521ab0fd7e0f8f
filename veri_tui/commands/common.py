"""What `veri-tui plan` and `veri-tui launch` share: the job described by their options.

Both commands take the same job options (cli._job_options); turning them into a JobConfig
lives here once so the two can never read them differently.
"""

from __future__ import annotations

import argparse
from typing import Any


def job_from_args(args: argparse.Namespace) -> Any:
    """The veri_tui.plan.JobConfig for the parsed job options; raises VeriError (bad input).

    The planning core is imported here, on first use, so importing a command module stays
    cheap for the commands that never plan (`jobs`, `logs`, `cancel`).
    """
    from veri_tui.plan import load_job_config

    return load_job_config(
        args.config,
        model=args.model,
        method=args.method,
        gpu=args.gpu,
        gpu_count=args.gpu_count,
        dataset=args.dataset,
        output=args.output,
        sets=args.sets,
    )


def hosts_of(args: argparse.Namespace, job: Any) -> str | list[str] | None:
    """The SSH host(s) to run on: every --host given, else veri.toml's `hosts`; one host as a
    string, several (a multi-node job, node 0 first) as a list, None for this machine."""
    hosts = list(getattr(args, "host", None) or job.hosts or [])
    if not hosts:
        return None
    return hosts[0] if len(hosts) == 1 else hosts
