"""Test-only fault injection, read from the environment variable VERI_FAULT.

This is how the tests "mock only CUDA": a rank raises exactly what a GPU failure raises,
at a chosen optimizer step, and everything around it (records, torchrun, supervisor) is
real. VERI_FAULT is a comma-separated list of `kind:rank:step`:

- `oom:R:S`   rank R raises torch.OutOfMemoryError (a CUDA OOM message) at step S
- `raise:R:S` rank R raises RuntimeError at step S
- `kill:R:S`  rank R sends itself SIGKILL at step S (leaves no record, like a lost rank)
- `ckpt_kill:R:S` rank R SIGKILLs itself during the checkpoint save of step S, after the
  checkpoint data is written and before the commit (rename into place)
- `ckpt_raise:R:S` rank R raises DCP's CheckpointException (a BaseException) while saving
  the checkpoint of step S
- `host_oom:R:S` rank R fills host memory at step S until the kernel's out-of-memory killer
  ends it (SIGKILL); it refuses (RuntimeError) unless its memory cgroup has a limit of at most
  HOST_OOM_MAX_LIMIT, so it can only ever fill a small cgroup, never the machine
- `late_kill:R:S` rank R dies the way a rank the OOM killer chose can: its connections close
  at once (its peers fail on "Connection closed"), the process is reaped only later, by
  SIGKILL (the kernel frees its memory first). Here the SIGKILL comes once torchrun's closing
  SIGTERM arrived (LATE_KILL_S at most): torchrun saw the peer fail first and sent the dying
  rank its SIGTERM, the order that once blamed the peer (docs/reliability.md)
- `skip:R:S` rank R skips step S's collectives: it never enters the step's first one (the
  global token count's all-reduce) and waits in `_stall` instead, as a rank held up on a path
  of its own (its data, a wait) while its peers wait in the collective. It does not go on to
  the next collective: under gloo that is a size mismatch, which aborts both ranks at once
  (`op.preamble.length <= op.nbytes ... Is there a distributed collective mismatch`), another
  fault than a hang
- `no_join:R:S` rank R never joins the process group (S is ignored: it waits in `_stall`
  before `init_process_group`), so the rendezvous never completes

Step S counts optimizer steps from 1; a step fault fires before that step's forward pass.
Unset (the normal case) costs one dictionary lookup per step.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from dataclasses import dataclass

KINDS = (
    "oom",
    "raise",
    "kill",
    "ckpt_kill",
    "ckpt_raise",
    "host_oom",
    "late_kill",
    "skip",
    "no_join",
)
HOST_OOM_MAX_LIMIT = 8 << 30
LATE_KILL_S = 60.0  # torchrun SIGKILLs a rank 30 s after its SIGTERM


@dataclass(frozen=True)
class Fault:
    """One planned fault: ``what`` (one of KINDS) on ``rank`` at ``step``."""

    what: str
    rank: int
    step: int


def parse(value: str | None) -> list[Fault]:
    """Parse VERI_FAULT; a malformed value is a ValueError (tests must not typo silently)."""
    faults = []
    for part in (value or "").split(","):
        if not part.strip():
            continue
        bits = part.strip().split(":")
        if len(bits) != 3 or bits[0] not in KINDS:
            raise ValueError(f"VERI_FAULT: {part!r} is not kind:rank:step with kind in {KINDS}")
        faults.append(Fault(bits[0], int(bits[1]), int(bits[2])))
    return faults


class FaultPlan:
    """The faults that concern this rank."""

    def __init__(self, rank: int, value: str | None = None) -> None:
        value = os.environ.get("VERI_FAULT") if value is None else value
        self.faults = [f for f in parse(value) if f.rank == rank]

    def at_step(self, step: int) -> None:
        """Fire a step fault planned for `step`, if any."""
        self._fire(step, ("oom", "raise", "kill", "host_oom", "late_kill", "skip"))

    def before_rendezvous(self) -> None:
        """Fire a `no_join` fault: never join the process group."""
        if any(f.what == "no_join" for f in self.faults):
            _stall()

    def in_checkpoint(self, step: int) -> None:
        """Fire a checkpoint fault planned for the save of `step`, if any."""
        self._fire(step, ("ckpt_kill", "ckpt_raise"))

    def _fire(self, step: int, kinds: tuple[str, ...]) -> None:
        for f in self.faults:
            if f.step != step or f.what not in kinds:
                continue
            if f.what in ("kill", "ckpt_kill"):
                os.kill(os.getpid(), signal.SIGKILL)
            if f.what == "oom":
                import torch

                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                    "of 79.11 GiB of which 1.02 GiB is free. (injected by VERI_FAULT)"
                )
            if f.what == "host_oom":
                _fill_host_memory()
            if f.what == "late_kill":
                _die_late()
            if f.what == "skip":
                _stall()
            if f.what == "raise":
                raise RuntimeError(f"injected failure at step {step} (VERI_FAULT)")
            if f.what == "ckpt_raise":
                from torch.distributed.checkpoint.api import CheckpointException

                cause = RuntimeError("unexpected pos 512 vs 448 (injected by VERI_FAULT)")
                # An empty stack: what torch prints for a rank's failure is then the cause.
                failure = (cause, traceback.StackSummary())
                raise CheckpointException("checkpoint save failed", {f.rank: failure})


def _stall() -> None:
    """Wait here until the job is ended: the rank's Python stack points at this line."""
    while True:
        time.sleep(1.0)


def _die_late() -> None:
    """The `late_kill` fault: shut every connected socket of this process down now, then
    SIGKILL this process once torchrun's closing SIGTERM came (LATE_KILL_S at most)."""
    import socket

    termed: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: termed.append(signum))
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=int(name))
        except (OSError, ValueError):
            continue  # not a socket
        try:
            # A listener is left alone: gloo aborts the process when its accept() fails.
            if not sock.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
                sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # an unconnected socket
        finally:
            sock.detach()  # the fd stays open, as the kernel's would until the process ends
    deadline = time.monotonic() + LATE_KILL_S
    while not termed and time.monotonic() < deadline:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)


def _fill_host_memory() -> None:
    """Allocate and touch 64 MiB at a time until the kernel kills this process."""
    from veri_tui.jobfolder.failures.hostmem import find_cgroup

    group = find_cgroup()
    limit = group.limit() if group else None
    if limit is None or limit > HOST_OOM_MAX_LIMIT:
        raise RuntimeError(
            "VERI_FAULT host_oom: refused; run the job in a memory cgroup limited to at most "
            f"{HOST_OOM_MAX_LIMIT >> 30} GiB (this one's limit: {limit})"
        )
    hoard = []
    while True:  # b"\x01" * n writes every page (zeroed allocations may stay unbacked)
        hoard.append(b"\x01" * (64 << 20))
