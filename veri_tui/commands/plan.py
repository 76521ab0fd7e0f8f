"""`veri-tui plan`: the plan header and plan line (or the --json record) for one job.

Headless and light: it imports the planning core only (no torch, no textual); the SSH side
(paramiko) only for --host or a --slurm login node.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from veri_tui.commands.common import hosts_of, job_from_args
from veri_tui.errors import Refusal, VeriError
from veri_tui.launch.memcheck import need_text
from veri_tui.plan import plan_job
from veri_tui.plan.calibration import calibrated_note
from veri_tui.plan.cost import cost_line
from veri_tui.plan.knobs import JobConfig
from veri_tui.plan.memory import gb
from veri_tui.plan.peak import peak_line
from veri_tui.plan.record import PlanRecord
from veri_tui.plan.resolve import human_count


def summary_lines(rec: PlanRecord) -> list[str]:
    """Activation, throughput, disk and cost lines printed after the plan (text mode).

    Not header lines: the job log's header is the parameter count, the budget, the decision and
    the plan line (contracts section 4); these estimates follow it.
    """
    out = []
    act = rec.activations
    if act.get("known"):
        out.append(
            f"activations: {gb(act['bytes_per_gpu'])}/GPU at mbs={act['micro_batch_size']} x "
            f"{act['sequence_length']} tokens (checkpointing {act['activation_checkpointing']};"
            f" none: {gb(act['without_checkpointing_bytes'])}, selective: "
            f"{gb(act['selective_bytes'])}, full: {gb(act['with_checkpointing_bytes'])}); "
            f"largest mbs that fits: {act['max_micro_batch_size']}{calibrated_note(act)}"
        )
    tp = rec.throughput
    if tp.get("known"):
        bound = ", communication-bound" if tp["communication_bound"] else ""
        # A mixture of experts computes with its active parameters, not N: say so.
        active = ""
        if rec.model.get("moe_layer_count"):
            active = (
                f" ({tp['flops_per_token'] / 1e9:.1f} GFLOP/token from the "
                f"{human_count(rec.active_parameter_count)} active parameters)"
            )
        out.append(
            f"throughput: ~{tp['tokens_per_s']:,.0f} tokens/s{active}, "
            f"step {tp['step_time_s']:.2f} s "
            f"(compute {tp['compute_s']:.2f} s + exposed communication "
            f"{tp['exposed_communication_s']:.2f} s + optimizer {tp['optimizer_s']:.2f} s"
            f"{beside_forward(tp)}), "
            f"scaling efficiency "
            f"{tp['scaling_efficiency']:.0%}{bound}{calibrated_note(tp)}"
        )
    elif tp:
        out.append(f"throughput: not estimated ({tp.get('reason')})")
    if act.get("known"):
        out.append(peak_line(act["peak"]))
    if rec.host_bytes_per_node:
        out.append(f"host memory: {need_text(rec)} of offloaded states (cpu_offload)")
    out.append(rec.disk.line())
    out.append(cost_line(rec.cost))
    return out


def run(args: argparse.Namespace) -> int:
    """Plan the job described by the parsed options; print text or JSON; exit status.

    With --host the plan is made for that host, as `launch --host` makes it: preflight
    there (its GPUs as custom-<GB>GB, the model's headers read over SFTP, every problem
    refused), so the model is a path or Hub id on the host and nothing is read here.
    With --slurm the plan is for the partition's nodes: its GPU type (from the nodes' gres)
    and count, nodes x GPUs per node (a CPU partition: gloo processes, as a local CPU job).
    """
    job = job_from_args(args)
    host = hosts_of(args, job)
    tracing = getattr(args, "trace", False)
    if tracing and host is not None:  # before any connection is tried
        raise VeriError("--trace runs here, on this machine's copy of the model; "
                        "drop --host/--slurm", key="trace")  # fmt: skip
    if host is None:
        rec = plan_job(job)
    else:
        from veri_tui.launch import jobs  # paramiko only when a host is used

        rec = jobs.plan_on(job, host, getattr(args, "trust_host", None))
    traced = None
    if tracing:
        from veri_tui.launch import jobs  # the child process and the spec: launch's side

        traced = jobs.trace(job, rec)
    if args.json:
        import json  # only for --json: a plain `veri-tui plan` never needs it

        out = rec.to_dict()
        if traced is not None:
            out["trace"] = traced
        json.dump(out, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n".join(rec.lines() + summary_lines(rec)))
        if traced is not None:
            from veri_tui.launch.jobs import trace_lines

            print("\n".join(trace_lines(traced, rec)))
    if (rec.cost or {}).get("data_error"):
        # A dataset launch would refuse (a bad row, a missing file): the plan is shown, and
        # the exit says it cannot run (docs/planning.md, Cost).
        print(f"error: dataset: {rec.cost['reason']}", file=sys.stderr)
        return 2
    if host is None and job.dataset:
        refused = launch_refusals(job, rec)
        for problem in refused:
            print(f"error: {problem.key}: {problem.message}", file=sys.stderr)
        return 2 if refused else 0
    if host is None and job.model and not has_tokenizer(rec):  # no rows to encode: a warning
        from veri_tui.launch.datacheck import NO_TOKENIZER

        print(f"warning: model: {NO_TOKENIZER.format(model=rec.model['path'])}; launch refuses "
              "it", file=sys.stderr)  # fmt: skip
    return 0


def has_tokenizer(rec: PlanRecord) -> bool:
    """Whether the plan's model folder (none: only its Hub metadata was read) holds a
    tokenizer's files."""
    from veri_tui.jobfolder.data.encode import tokenizer_files

    model = rec.model.get("path")
    return not model or bool(tokenizer_files(os.listdir(model)))


def launch_refusals(job: JobConfig, rec: PlanRecord) -> list[Refusal]:
    """What `launch` would refuse of a plan made here with a dataset: its rows encoded with
    the model's tokenizer as the launch's preflight does (launch/datacheck.py: a model folder
    without tokenizer files, a tokenizer that gives no ids, rows with nothing to train on, a
    global batch larger than the rows)."""
    from veri_tui.launch.datacheck import check_data
    from veri_tui.launch.local_host import LocalHost

    return check_data(LocalHost(), None, job, rec)[1]


def beside_forward(tp: dict[str, Any]) -> str:
    """` - 0.56 s beside the next forward`: the host step's part the plan hides (cpu_offload)."""
    hidden = (tp.get("optimizer") or {}).get("hidden_s") or 0.0
    return f" - {hidden:.2f} s beside the next forward" if hidden > 0 else ""
