"""What `veri-tui plan` and `veri-tui launch` share: the job described by their options.

Both commands take the same job options (cli._job_options); turning them into a JobConfig
lives here once so the two can never read them differently. `launch`'s canary options are
declared here too (cli.py stays the parser's shape).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from veri_tui.errors import VeriError


def job_from_args(args: argparse.Namespace) -> Any:
    """The veri_tui.plan.JobConfig for the parsed job options; raises VeriError (bad input).

    The planning core is imported here, on first use, so importing a command module stays
    cheap for the commands that never plan (`jobs`, `logs`, `cancel`).
    """
    from veri_tui.plan import load_job_config

    given = args.dataset or []  # one --dataset is a source, several are a mixture
    sets = list(args.sets)
    if getattr(args, "eval_dataset", None):
        sets.insert(0, f"eval_dataset={args.eval_dataset}")
    return load_job_config(
        args.config,
        model=args.model,
        method=args.method,
        gpu=args.gpu,
        gpu_count=args.gpu_count,
        dataset=given[0] if len(given) == 1 else (given or None),
        output=args.output,
        sets=sets,
    )


def hosts_of(args: argparse.Namespace, job: Any) -> Any:
    """Where to run: the Slurm options (`--slurm` or veri.toml's `[slurm]`, slurm_of), else
    the SSH host(s): every --host given, else veri.toml's `hosts`; one host as a string,
    several (a multi-node job, node 0 first) as a list; None for this machine."""
    hosts = list(getattr(args, "host", None) or job.hosts or [])
    slurm = slurm_of(args)
    if slurm is not None:
        if hosts:
            raise VeriError("--slurm and --host (or veri.toml's hosts) are two targets; "
                            "keep one", key="slurm")  # fmt: skip
        return slurm
    if not hosts:
        return None
    return hosts[0] if len(hosts) == 1 else hosts


#: The Slurm options of `plan` and `launch` (cli._slurm_options), as `[slurm]` keys.
SLURM_ARGS = ("partition", "nodes", "gpus_per_node", "account", "time", "qos")


def slurm_of(args: argparse.Namespace) -> Any:
    """The Slurm options (veri_tui.launch.slurm.options.SlurmOptions) from veri.toml's
    `[slurm]` table and the command line (which wins); None when no login node is named.
    VeriError for a bad key or value."""
    from veri_tui.launch.slurm.options import slurm_options
    from veri_tui.plan.config import read_toml

    table = read_toml(Path(args.config)).get("slurm") if args.config else None
    if table is not None and not isinstance(table, dict):
        raise VeriError(f"{args.config}: [slurm] must be a table (login = ..., partition = ...)",
                        key="slurm")  # fmt: skip
    given = {key: getattr(args, key, None) for key in SLURM_ARGS}
    return slurm_options(table, {"login": getattr(args, "slurm", None), **given})


def canary_options(p: argparse.ArgumentParser) -> None:
    """The canary and its gate (docs/canary.md)."""
    g = p.add_argument_group("canary: K measured steps, then go or no-go (docs/canary.md)")
    g.add_argument(
        "--canary", nargs="?", const=3, type=int, metavar="K",
        help="run K steps first (default 3; the longest samples first), save and load back a "
        "checkpoint, print measured against planned and the extrapolated time and cost, "
        "then go on or stop by the gate",
    )  # fmt: skip
    g.add_argument("--max-cost", type=float, metavar="USD",
                   help="no-go when the extrapolated cost is above this")  # fmt: skip
    g.add_argument("--max-hours", type=float, metavar="H",
                   help="no-go when the extrapolated wall time is above this")  # fmt: skip
    g.add_argument(
        "--headroom", type=float, metavar="F",
        help="no-go when a rank's device peak leaves less than this share of its memory "
        "free (default 0.1)",
    )  # fmt: skip
