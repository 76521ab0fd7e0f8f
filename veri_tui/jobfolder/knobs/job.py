"""The job's own fields: what runs where (contracts section 1); its knobs are in fields.py.

They may be written among the hyperparameters too (the seed's "Set gpu_count above 1 on
... job"): the planner reads both tables as one set of keys.
"""

# No `from __future__ import annotations`: the field types stay objects, so reading them
# (schema.table) needs no typing.get_type_hints, which compiles every annotation string.
from dataclasses import dataclass
from typing import Any

from veri_tui.jobfolder.knobs.fields import DEFAULT_GPU, METHODS
from veri_tui.jobfolder.knobs.schema import knob


# No __init__, __repr__ or __eq__ of its own (each costs an exec at import): the planner's
# KnobModel and the trainer's TrainConfig make theirs.
@dataclass(kw_only=True, init=False, repr=False, eq=False)
class Job:
    """A job: method + model + GPU type + gpu_count + dataset + output (+ its hosts)."""

    # fmt: off
    method: str = knob("sft_text", "sft_text or dpo", section="Job", choices=METHODS)
    model: str | None = knob(
        None, "local checkpoint directory or Hub id (default: bundled tiny model)")
    gpu: str = knob(DEFAULT_GPU, "GPU type, e.g. L4-24GB, H100-80GB, custom-48GB",
                    section="Job", label="GPU type", widget="select")
    gpu_count: int = knob(1, "GPUs (training processes)", section="Job")
    # --- datasets (issue 27): a source is a path or Hub id with options (veri_tui/jobfolder/
    # source.py: "PATH,config=C,split=S,weight=W,prompt=COLUMN", or a table); a list
    # of sources is a mixture. The planner checks them (veri_tui/plan/knobs.py). ---
    dataset: str | dict[str, Any] | list[str | dict[str, Any]] | None = knob(
        None, "JSONL/JSON/parquet/CSV file, save_to_disk folder or Hub id (org/name), "
        "options as PATH,config=C,split=S,weight=W,<key>=<column>; a list mixes",
        section="Job", hint="file or org/name")
    eval_dataset: str | dict[str, Any] | list[str | dict[str, Any]] | None = knob(
        None, "the rows eval_loss is taken on, in dataset's forms (default: eval_fraction "
        "of the dataset)")
    output: str | None = knob(None, "output directory for the final artifact")
    hosts: list[str] | None = knob(
        None, "SSH hosts, one node each, node 0 first (several: a multi-node job)")
    rdzv_endpoint: str | None = knob(
        None, "node 0's address[:port] as the other nodes reach it (default: the address "
        "SSH used, port rdzv_port)")
    rdzv_port: int | None = knob(
        None, "node 0's rendezvous port (default: a free one there)", ge=1, le=65535)
    node_count: int | None = knob(
        None, "nodes of a job whose hosts a scheduler picks (a Slurm allocation's --nodes; "
        "set by the launcher)", ge=1)
    # fmt: on
