"""What `veri-tui plan` and `veri-tui launch` share: the job described by their options.

Both commands take the same job options (veri_tui/commands/options.py `_job_options`);
turning them into a JobConfig lives here once so the two can never read them differently.
`launch`'s canary options are declared here too (options.py stays the parser's shape).
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
    """Where to run, as the backend registry (veri_tui.launch.backends) reads each backend's
    options from the command line and veri.toml's `[<backend>]` table (the command line
    wins): the Slurm options (`--slurm`, `[slurm]`), else the SSH host(s): every --host
    given, else veri.toml's `hosts`; one host as a string, several (a multi-node job, node 0
    first) as a list; None for this machine. VeriError for a bad value, or two targets."""
    from veri_tui.launch import backends

    tables = _backend_tables(args.config, [b.name for b in backends.backends()])
    return backends.where_from(vars(args), tables, job)


def _backend_tables(config: str | None, names: list[str]) -> dict[str, Any]:
    """veri.toml's `[<backend>]` tables; VeriError for one that is not a table."""
    if not config:
        return {}
    from veri_tui.launch import backends
    from veri_tui.plan.config import read_toml

    data = read_toml(Path(config))
    tables = {name: data[name] for name in names if data.get(name) is not None}
    for name, table in tables.items():
        if not isinstance(table, dict):
            keys = ", ".join(f"{o.name} = ..." for o in backends.options_of(name)[:2])
            raise VeriError(f"{config}: [{name}] must be a table ({keys})", key=name)
    return tables


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
