"""DCP checkpoints with a commit protocol: a checkpoint is visible only when complete.

Every rank saves into `checkpoints/step-N.tmp/` (DCP writes each rank's data, then rank 0
writes `.metadata` last). After a barrier, rank 0 checks `.metadata`, writes
`trainer_state.json` (step, scheduler, data position), a manifest (size + sha256 of every
file: a zero-filled safetensors-like body loads without error otherwise) and `COMPLETE`,
fsyncs, renames the folder to `step-N` and fsyncs the parent. Only committed steps are
purged, never the newest. Resume picks the newest committed step whose manifest verifies.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from trainer.errors import TrainerError
from trainer.faults import FaultPlan
from trainer.report import atomic_write, classify, describe

MANIFEST = "manifest.json"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


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
    """Every file the manifest lists is there with its size and sha256."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        for name, meta in manifest["files"].items():
            f = folder / name
            if f.stat().st_size != meta["size"] or _sha256(f) != meta["sha256"]:
                return False
    except (OSError, ValueError, KeyError):
        return False
    return (folder / ".metadata").is_file()


def _commit(tmp: Path, final: Path, extra: dict[str, Any]) -> None:
    if not (tmp / ".metadata").is_file():
        raise TrainerError("UNKNOWN", f"checkpoint {tmp}: DCP wrote no .metadata")
    atomic_write(tmp / "trainer_state.json", json.dumps(extra))
    files = {}
    for f in sorted(tmp.iterdir()):
        if f.is_file():
            files[f.name] = {"size": f.stat().st_size, "sha256": _sha256(f)}
    atomic_write(tmp / MANIFEST, json.dumps({"step": extra["step"], "files": files}, indent=1))
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
    if rank == 0:
        _commit(tmp, final, {**extra, "step": step})
        _purge(root, keep)
    dist.barrier()
    return final


def latest(root: Path) -> int | None:
    """Rank 0 finds the newest verified step and tells everyone; stale .tmp folders go."""
    choice: list[int | None] = [None]
    if dist.get_rank() == 0:
        for p in root.glob("step-*.tmp"):
            shutil.rmtree(p, ignore_errors=True)
        for step in reversed(committed_steps(root)):
            if verify(root / f"step-{step}"):
                choice[0] = step
                break
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
