"""DCP checkpoints with a commit protocol: a checkpoint is visible only when complete.

Every rank saves into `checkpoints/step-N.tmp/` (DCP writes each rank's data, then rank 0
writes `.metadata` last). After a barrier every rank hashes its share of the files (so no
rank hashes a large checkpoint alone while the others wait), rank 0 checks `.metadata`,
writes `trainer_state.json` (step, scheduler, data position), the manifest (trainer/manifest.py:
size + sha256 of every file: a zero-filled body loads without error otherwise) and
`COMPLETE`, fsyncs, renames the folder to `step-N` and fsyncs the parent. Only committed steps are
purged, never the newest. Resume picks the newest committed step whose manifest verifies.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from trainer import ckptindex, manifest
from trainer.errors import TrainerError
from trainer.faults import FaultPlan
from trainer.report import atomic_write, classify, describe


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _options(lora: bool) -> StateDictOptions:
    # LoRA: the frozen base is the model directory itself; checkpoint only what trains.
    # Loading then leaves the frozen keys alone (strict=False); dcp.load still fails on any
    # requested (trainable) key the checkpoint lacks.
    return StateDictOptions(ignore_frozen_params=lora, strict=not lora)


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
    supervisor's check, trainer/ckptindex.py)."""
    return not ckptindex.problems(folder)


def _hash_share(tmp: Path) -> dict[str, manifest.FileEntry]:
    """Each rank hashes every world_size-th file; rank 0 gets them all (collective)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = {name: manifest.entry(tmp / name) for name in manifest.listed(tmp)[rank::world]}
    shares: list[Any] = [None] * world
    dist.all_gather_object(shares, mine)
    return {name: e for share in shares for name, e in share.items()}


def _commit(
    tmp: Path, final: Path, extra: dict[str, Any], hashed: dict[str, Any] | None = None
) -> None:
    if not (tmp / ".metadata").is_file():
        raise TrainerError("UNKNOWN", f"checkpoint {tmp}: DCP wrote no .metadata")
    atomic_write(tmp / "trainer_state.json", json.dumps(extra))
    manifest.write(tmp, hashed, step=extra["step"])
    atomic_write(tmp / "COMPLETE", "ok\n")
    _fsync_dir(tmp)
    os.rename(tmp, final)
    _fsync_dir(final.parent)


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
    """Save and commit checkpoint `step` (collective: every rank calls it)."""
    rank = dist.get_rank()
    tmp, final = root / f"step-{step}.tmp", root / f"step-{step}"
    if rank == 0:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)  # a stale partial save: never save into it
    dist.barrier()
    msd, osd = get_state_dict(model, optimizer, options=_options(lora))
    try:
        dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(tmp))
        faults.in_checkpoint(step)
    except BaseException as exc:  # CheckpointException is a BaseException
        note = _disk_note(root)  # before the cleanup frees the space again
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        code, _ = classify(exc)
        message = f"checkpoint step-{step} failed ({note}): {describe(exc)}"
        raise TrainerError(code, message) from exc
    dist.barrier()
    hashed = _hash_share(tmp)
    if rank == 0:
        _commit(tmp, final, {**extra, "step": step}, hashed)
        _purge(root, keep)
    dist.barrier()
    return final


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
    opts = _options(lora)
    msd, osd = get_state_dict(model, optimizer, options=opts)
    state = {"model": msd, "optim": osd}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(
        model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
        options=opts,
    )
    return json.loads((folder / "trainer_state.json").read_text())
