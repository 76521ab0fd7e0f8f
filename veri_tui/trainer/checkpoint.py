"""DCP checkpoints with a commit protocol: a checkpoint is visible only when complete.

Every rank saves into `checkpoints/step-N.tmp/` (DCP writes each rank's data, then rank 0 writes
`.metadata` last). After a barrier every rank hashes its share of the files (so no rank hashes a
large checkpoint alone while the others wait), rank 0 checks `.metadata`, writes
`trainer_state.json` (step, scheduler, data position), the manifest
(veri_tui/jobfolder/contract/manifest.py: size + sha256 of every file: a zero-filled body loads
without error otherwise) and `COMPLETE`, fsyncs, renames the folder to `step-N` and fsyncs the
parent. Only committed steps are purged, never the newest, and only once every rank is past the
commit. Resume picks the newest committed step whose manifest verifies.

A multi-node job (fewer ranks per node than in all) has one job folder per node, on disks the other
nodes may not see: there every rank saves a rank-local DCP checkpoint (its own `__<rank>_*.distcp`
and `__<rank>.metadata`, torch's `use_collectives=False` format: replicated state written by every
rank, so each node's folder loads on its own ranks without reading another node's files), and each
node's local rank 0 commits its node's part: the manifest (with the node's `ranks`) and `COMPLETE`,
in that node's folder. A step is then usable only when every node committed it; the launcher picks
such a step (docs/ssh.md, Multi-node jobs). Such a checkpoint loads at the same world size and node
layout only (no resharding). A Slurm job's nodes share one job folder
(`veri_tui.jobfolder.contract.stopping.SHARED_ENV`): it saves one global checkpoint, as a single
node does, which DCP reshards on load for any node count.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

# DCP's reader, load and save from the modules that define them: torch's package re-exports
# them without an __all__, which mypy --strict does not count as exported.
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_optimizer_state_dict,
    get_state_dict,
    set_optimizer_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.nn.parallel import DistributedDataParallel as DDP

from veri_tui.jobfolder.contract import ckptindex, manifest
from veri_tui.jobfolder.contract.atomic import fsync_dir
from veri_tui.jobfolder.contract.errors import TrainerError
from veri_tui.jobfolder.contract.status import FailureCode
from veri_tui.jobfolder.contract.stopping import SHARED_ENV
from veri_tui.trainer.faults import FaultPlan
from veri_tui.trainer.report import atomic_write, classify, describe

# torch's checkpoint_wrapper segment, which get_state_dict leaves out of names (torch 2.13).
_CHECKPOINT_PREFIX = "_checkpoint_wrapped_module."


def _options(lora: bool) -> StateDictOptions:
    # LoRA: the frozen base is the model directory itself; checkpoint only what trains.
    # Loading then leaves the frozen keys alone (strict=False); dcp.load still fails on any
    # requested (trainable) key the checkpoint lacks.
    return StateDictOptions(ignore_frozen_params=lora, strict=not lora)


def trainable_state(model: nn.Module) -> dict[str, Any]:
    """LoRA / QLoRA: the trainable parameters only, by the names torch's get_state_dict gives
    them (DDP's `module.` and checkpoint wrappers left out), as views of the parameters, so
    dcp.load fills them in place.

    Not `get_model_state_dict(ignore_frozen_params=True)`: that drops frozen *parameters*
    only, and walks `model.state_dict()`, in which a bitsandbytes NF4 base adds its
    quantization state (`weight.absmax`, `weight.quant_map`, `weight.quant_state...`):
    those tensors would be checkpointed at every save, and torch's name walk raises on them
    with older bitsandbytes releases (Params4bit without those attributes)."""
    inner = model.module if isinstance(model, DDP) else model
    return {
        name.replace(_CHECKPOINT_PREFIX, ""): p.detach()
        for name, p in inner.named_parameters()
        if p.requires_grad
    }


def state_dicts(model: nn.Module, optimizer: Any, lora: bool) -> tuple[dict[str, Any], Any]:
    """(model, optimizer) state dicts to save or load into: only what trains under LoRA."""
    opts = _options(lora)
    if not lora:
        return get_state_dict(model, optimizer, options=opts)
    return trainable_state(model), get_optimizer_state_dict(model, optimizer, options=opts)


def committed_steps(root: Path) -> list[int]:
    """Steps with a committed folder (`step-N` holding COMPLETE), oldest first."""
    steps = []
    for p in root.glob("step-*"):
        tail = p.name.removeprefix("step-")
        if tail.isdigit() and (p / "COMPLETE").is_file():
            steps.append(int(tail))
    return sorted(steps)


def verify(folder: Path) -> bool:
    """A complete checkpoint: DCP's `.metadata` and every file as its manifest says (the
    supervisor's check, veri_tui/jobfolder/contract/ckptindex.py)."""
    return not ckptindex.problems(folder)


def node_ranks() -> list[int] | None:
    """The global ranks on this rank's node when the job spans several nodes, else None.
    torchrun gives every node the same number of ranks (LOCAL_WORLD_SIZE), node k holding
    ranks k*n .. k*n+n-1, as the launcher lays them out. None too when every node shares the
    job folder (a Slurm job, `SHARED_ENV`): the global checkpoint loads on any node count."""
    world = dist.get_world_size()
    if os.environ.get(SHARED_ENV) == "1":
        return None  # one job folder on storage every node sees: one global checkpoint
    per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if per_node >= world:
        return None
    first = dist.get_rank() // per_node * per_node
    return list(range(first, first + per_node))


def _hash_share(tmp: Path, ranks: list[int] | None) -> dict[str, manifest.FileEntry]:
    """Each rank hashes its share of the files, rank 0 (a node's first rank, across nodes)
    gets them all (collective). On one node: every world_size-th file. Across nodes each
    rank hashes its own rank-local files, which only its node holds."""
    rank, world = dist.get_rank(), dist.get_world_size()
    names = manifest.listed(tmp)
    if ranks is None:
        names = names[rank::world]
    else:
        names = [n for n in names if n.startswith(f"__{rank}_") or n == f"__{rank}.metadata"]
    mine = {name: manifest.entry(tmp / name) for name in names}
    shares: list[Any] = [None] * world
    dist.all_gather_object(shares, mine)
    if ranks is not None:  # the node's own files only: the others are on other disks
        shares = [shares[r] for r in ranks]
    return {name: e for share in shares for name, e in share.items()}


def _commit(
    tmp: Path,
    final: Path,
    extra: dict[str, Any],
    hashed: dict[str, Any] | None = None,
    ranks: list[int] | None = None,
) -> None:
    wanted = [".metadata"] if ranks is None else [f"__{r}.metadata" for r in ranks]
    missing = [name for name in wanted if not (tmp / name).is_file()]
    if missing:
        raise TrainerError(FailureCode.UNKNOWN, f"checkpoint {tmp}: DCP wrote no {missing[0]}")
    atomic_write(tmp / "trainer_state.json", json.dumps(extra))
    more = {} if ranks is None else {"ranks": ranks}
    manifest.write(tmp, hashed, step=extra["step"], **more)
    atomic_write(tmp / "COMPLETE", "ok\n")
    fsync_dir(tmp)
    os.rename(tmp, final)
    fsync_dir(final.parent)


def _purge(root: Path, keep: int) -> None:
    steps = committed_steps(root)
    for step in steps[: max(0, len(steps) - max(1, keep))]:
        shutil.rmtree(root / f"step-{step}", ignore_errors=True)


def _disk_note(root: Path) -> str:
    try:
        st = os.statvfs(root)
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        full = " (full)" if free < 0.02 * total else ""
        return f"{free} of {total} bytes free{full} on the checkpoint disk {root}"
    except OSError:
        return "free space unknown"


def save(
    root: Path,
    step: int,
    model: nn.Module,
    optimizer: Any,
    extra: dict[str, Any],
    *,
    lora: bool,
    keep: int,
    faults: FaultPlan,
) -> Path:
    """Save and commit checkpoint `step` (collective: every rank calls it). Each node's first
    rank owns its node's folder (rank 0 on a single node)."""
    ranks = node_ranks()
    leader = dist.get_rank() == (ranks[0] if ranks else 0)
    tmp, final = root / f"step-{step}.tmp", root / f"step-{step}"
    if leader:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # a stale partial save: never save into it
    dist.barrier()
    msd, osd = state_dicts(model, optimizer, lora)
    try:
        with warnings.catch_warnings():
            # Rank-local saves: a node's second rank sees its first rank's metadata file in
            # the fresh folder and warns that it "overwrites" a checkpoint; it does not.
            warnings.filterwarnings("ignore", "Detected an existing checkpoint")
            dcp_save({"model": msd, "optim": osd}, checkpoint_id=str(tmp),
                     use_collectives=ranks is None)  # fmt: skip
        faults.in_checkpoint(step)
    except BaseException as exc:  # CheckpointException is a BaseException
        note = _disk_note(root)  # before the cleanup frees the space again
        if leader:
            shutil.rmtree(tmp, ignore_errors=True)
        code, _ = classify(exc)
        message = f"checkpoint step-{step} failed ({note}): {describe(exc)}"
        raise TrainerError(code, message) from exc
    dist.barrier()
    hashed = _hash_share(tmp, ranks)
    if leader:
        _commit(tmp, final, {**extra, "step": step}, hashed, ranks)
    # Purged only once every node has committed: a node killed before its commit leaves
    # the other nodes' previous step, so some step stays committed on every node.
    dist.barrier()
    if leader:
        _purge(root, keep)
    return final


def restore(model: nn.Module, optimizer: Any, msd: dict[str, Any], osd: Any, lora: bool) -> None:
    """Put loaded state dicts into the model and optimizer (DCP filled them in place)."""
    opts = _options(lora)
    if lora:  # the adapters were loaded in place (views); the base is the model directory
        set_optimizer_state_dict(model, optimizer, optim_state_dict=osd, options=opts)
    else:
        set_state_dict(model, optimizer, model_state_dict=msd, optim_state_dict=osd, options=opts)


class _RankLocalReader(FileSystemReader):
    """Reads this rank's own `__<rank>.metadata` first. DCP would find it too, but only
    after logging the missing global `.metadata` as a warning with a traceback."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        return super().read_metadata(rank=dist.get_rank())


def latest(root: Path) -> int | None:
    """Rank 0 finds the newest verified step and tells everyone; stale .tmp folders go."""
    choice: list[int | None] = [None]
    if dist.get_rank() == 0:
        for p in root.glob("step-*.tmp"):
            shutil.rmtree(p, ignore_errors=True)
        choice[0] = ckptindex.choose(root).step  # the choice the supervisor makes too
    dist.broadcast_object_list(choice, src=0)
    return choice[0]


def load(root: Path, step: int, model: nn.Module, optimizer: Any, *, lora: bool) -> dict[str, Any]:
    """Load model and optimizer state of `step` in place; return its trainer_state."""
    folder = root / f"step-{step}"
    msd, osd = state_dicts(model, optimizer, lora)
    state = {"model": msd, "optim": osd}
    if (folder / ".metadata").is_file():
        dcp_load(state, checkpoint_id=str(folder))
    else:  # a node's part of a multi-node checkpoint: each rank reads its own files
        dcp_load(state, storage_reader=_RankLocalReader(folder))
    restore(model, optimizer, state["model"], state["optim"], lora)
    trainer_state: dict[str, Any] = json.loads((folder / "trainer_state.json").read_text())
    return trainer_state
