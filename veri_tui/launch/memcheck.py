"""The host-memory preflight: what the plan says a node needs against what the node has.

The need is the plan's `host_bytes_per_node` (veri_tui/plan/memory.py: the states cpu_offload
keeps in host memory, for the ranks of one node); what the node has is MemAvailable from its
/proc/meminfo (the kernel's estimate of what can be allocated without swapping), read here for
a local job and over SSH for a host's (veri_tui.launch.ssh.preflight's probe). A job that does
not fit is refused before anything starts, with the numbers and the ways out:

    error: host_memory: 564.4 GB per node needed (2 ranks x 282.2 GB), 22.6 GB available on
    this machine; use fewer ranks per node, LoRA (lora_rank), or no cpu_offload   (one line)

Without /proc/meminfo (not Linux) the check is skipped and its row says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from veri_tui.errors import Refusal, VeriError
from veri_tui.plan.memory import gb

if TYPE_CHECKING:
    from veri_tui.plan import PlanRecord

Row = tuple[str, bool, str]
WAYS_OUT = "use fewer ranks per node, LoRA (lora_rank), or no cpu_offload"


def mem_available(text: str) -> int | None:
    """MemAvailable in bytes from /proc/meminfo's text (its figures are kB); None if absent."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def local_available(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """This machine's MemAvailable in bytes; None where there is no /proc/meminfo."""
    try:
        return mem_available(meminfo.read_text())
    except OSError:
        return None


def ranks_per_node(rec: PlanRecord) -> int:
    """The ranks one node runs: gpu_count split over the job's hosts (one node without)."""
    job = rec.job
    return max(int(job["gpu_count"]) // max(len(job.get("hosts") or ()), 1), 1)


def need_text(rec: PlanRecord, verb: str = "") -> str:
    """`564.4 GB per node (2 ranks x 282.2 GB)`, ``verb`` after `per node`: the plan's host
    memory, per node and per rank."""
    ranks = ranks_per_node(rec)
    need = rec.host_bytes_per_node
    return f"{gb(need)} per node{verb} ({ranks} ranks x {gb(-(-need // ranks))})"


def check(rec: PlanRecord, available: int | None, where: str) -> Row:
    """Refuse (VeriError, key `host_memory`) a plan whose host memory per node exceeds
    ``available`` bytes on ``where``; else its preflight row."""
    if available is None:
        return ("host_memory", True, f"not checked: no MemAvailable on {where}")
    if rec.host_bytes_per_node > available:
        msg = f"{need_text(rec, ' needed')}, {gb(available)} available on {where}; {WAYS_OUT}"
        raise VeriError([Refusal("host_memory", msg)])
    if not rec.host_bytes_per_node:
        return ("host_memory", True, f"no offloaded states; {gb(available)} available on {where}")
    return ("host_memory", True, f"{need_text(rec)} of {gb(available)} available on {where}")


def check_local(rec: PlanRecord) -> Row:
    """`check` against this machine's MemAvailable."""
    return check(rec, local_available(), "this machine")
