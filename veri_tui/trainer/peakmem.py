"""Peak memory as a metric line reports it: per logging window, the fullest rank's.

Each logged step's `peak_mem_bytes` is the largest peak over every rank (all-reduced with
MAX: a rank other than 0 may be the one near its limit), and on CUDA `peak_reserved_bytes`
beside it (the caching allocator's reserve, what an out-of-memory is judged against). On
CUDA the allocator's peak counters are reset after each read, so a line says what its own
window of steps needed, not the run's peak so far; `run_peaks` keeps the run's peak for the
job's measured record (veri_tui/trainer/runstats.py). On CPU the process's resident peak (VmHWM)
cannot be reset without disturbing the phase measurements (veri_tui/trainer/measure.py), so there a
line carries the peak since the process started.
"""

from __future__ import annotations

import resource

import torch
import torch.distributed as dist

# The run's CUDA peaks from windows already reset: (allocated, reserved), per process.
_RUN = [0, 0]


def _cuda_now(device: torch.device) -> tuple[int, int]:
    return int(torch.cuda.max_memory_allocated(device)), int(torch.cuda.max_memory_reserved(device))


def run_peaks(device: torch.device) -> tuple[int, int]:
    """The run's CUDA peaks so far (allocated, reserved), across the windows' resets."""
    alloc, reserved = _cuda_now(device)
    return max(alloc, _RUN[0]), max(reserved, _RUN[1])


def window_peak(device: torch.device) -> dict[str, int]:
    """This window's peak over every rank; a collective (every rank calls it at the same
    logged steps). CUDA: allocated and reserved, then the counters start a new window."""
    if device.type == "cuda":
        alloc, reserved = _cuda_now(device)
        _RUN[0], _RUN[1] = max(_RUN[0], alloc), max(_RUN[1], reserved)
        torch.cuda.reset_peak_memory_stats(device)
        values = max_over_ranks([alloc, reserved], device)
        return {"peak_mem_bytes": values[0], "peak_reserved_bytes": values[1]}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"peak_mem_bytes": max_over_ranks([rss], device)[0]}


def max_over_ranks(values: list[int], device: torch.device) -> list[int]:
    """Each value's largest over the process group's ranks (as they are, without a group);
    on `device`, since NCCL reduces only CUDA tensors."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return list(values)
    tensor = torch.tensor(values, dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [int(v) for v in tensor.tolist()]
