"""A checkpoint save as far as DCP plans it: the trainer's state dicts through DCP's planner
and every item resolved, with nothing written.

Fake tensors have no bytes to write, but everything before the write is the real save's:
`get_state_dict` on the wrapped model and optimizer (checkpoint.state_dicts), DCP's default
planner flattening and de-duplicating them, each item's local data resolved (a DTensor's
shard, an optimizer state of the device it lives on). `plan_save` returns the bytes this
rank would write. It runs without collectives (`no_dist`): the fake group's ranks do not
exist to agree on a global plan, and each rank's local plan is all its own files hold.
"""

from __future__ import annotations

import math
import os
from typing import Any

from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan, SavePlanner, WriteItem
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.storage import StorageWriter, WriteResult
from torch.futures import Future


def _item_bytes(item: WriteItem) -> int:
    """What the item writes: its chunk (a shard of a DTensor: WriteItem's own
    tensor_storage_size counts the global tensor), or its serialized bytes."""
    if item.tensor_data is not None:
        numel = math.prod(item.tensor_data.chunk.sizes)
        return numel * item.tensor_data.properties.dtype.itemsize
    return item.bytes_io_data.nbytes if item.bytes_io_data else 0


class PlanOnlyWriter(StorageWriter):
    """Counts what it is asked to write; writes nothing."""

    def __init__(self) -> None:
        self.bytes = 0

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        """Nothing to reset: no storage."""

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        """Nothing to set up."""

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        """The planner's plan as it is."""
        return plan

    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]:
        """The planner's plans as they are."""
        return plans

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]:
        """Resolve every item (the save's own device work) and count its bytes."""
        results = []
        for item in plan.items:
            planner.resolve_data(item)
            size = _item_bytes(item)
            self.bytes += size
            results.append(WriteResult(index=item.index, size_in_bytes=size, storage_data=None))
        done: Future[list[WriteResult]] = Future()
        done.set_result(results)
        return done

    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None:
        """Nothing to commit."""

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        """Any id: nothing is stored under it."""
        return True


def plan_save(state: dict[str, Any]) -> int:
    """Plan and resolve the save of `state` on this rank; the bytes it would write."""
    writer = PlanOnlyWriter()
    dcp_save(state, storage_writer=writer, no_dist=True)
    return writer.bytes
