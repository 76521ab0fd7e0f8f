"""PlanRecord: the resolved plan, as `veri-tui plan --json` prints it and the job spec holds it.

The plan line format is fixed by contracts section 4; the header lines before it say the
parameter count (and, for a mixture of experts, the experts and the active parameters), the
budget and the decision. A record renders as text in a terminal or rich console and as HTML
in a notebook (veri_tui.plan.html).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

# PIN_KEYS: the knobs of resolved_parallelism that pin the plan. One list for the planner and
# the trainer, in the job folder's stdlib module (uploaded with the trainer to GPU hosts).
from veri_tui.jobfolder.knobs import PIN_KEYS

if TYPE_CHECKING:
    from veri_tui.plan.disk import DiskEstimate
    from veri_tui.plan.suggest import Suggestion


def plan_line(rp: dict[str, Any], states_bytes: int) -> str:
    """`plan: dp=... (<auto|requested>: <x.x> GB states/GPU)` exactly as contracts s.4."""
    how = "auto" if rp["zero_stage_requested"] == "auto" else "requested"
    # on|off as contracts s.4; "selective" names the one mode the alias cannot (docs).
    mode = rp.get("activation_checkpointing")
    gc = "selective" if mode == "selective" else "on" if rp["gradient_checkpointing"] else "off"
    return (
        f"plan: dp={rp['data_parallel_size']} zero_stage={rp['zero_stage']} tp=1 cp=1 "
        f"mbs={rp['micro_batch_size']} grad_acc={rp['gradient_accumulation_steps']} "
        f"gbs={rp['global_batch_size']} precision={rp['precision']} "
        f"gradient_checkpointing={gc} ({how}: {states_bytes / 1e9:.1f} GB states/GPU)"
    )


class PlanRecord(NamedTuple):
    """Everything `veri-tui plan` decides for one job; `to_dict()` is its JSON form.

    Immutable; a NamedTuple rather than a dataclass because it is cheaper to define, which
    every `veri-tui plan` start-up pays (benchmarks/bench_plan.py)."""

    parameter_count: int
    active_parameter_count: int  # per token: N less the routed experts it skips (MoE)
    trainable_parameter_count: int
    budget_bytes: int
    states_bytes_per_gpu: int
    host_bytes_per_node: int
    fits: bool
    header_lines: list[str]
    plan_line: str
    warnings: list[str]
    suggestions: list[Suggestion]
    activations: dict[str, Any]
    throughput: dict[str, Any]
    resolved_parallelism: dict[str, Any]
    job: dict[str, Any]
    model: dict[str, Any]
    gpu: dict[str, Any]
    disk: DiskEstimate  # checkpoints and artifact on disk (disk.py)
    cost: dict[str, Any]  # time and cost of the whole job (cost.py)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of contracts section 4 (plain types only)."""
        return {
            "parameter_count": self.parameter_count,
            "active_parameter_count": self.active_parameter_count,
            "trainable_parameter_count": self.trainable_parameter_count,
            "budget_bytes": self.budget_bytes,
            "states_bytes_per_gpu": self.states_bytes_per_gpu,
            "host_bytes_per_node": self.host_bytes_per_node,
            "fits": self.fits,
            "header_lines": list(self.header_lines),
            "plan_line": self.plan_line,
            "warnings": list(self.warnings),
            "suggestions": [s.to_dict() for s in self.suggestions],
            "activations": dict(self.activations),
            "throughput": dict(self.throughput),
            "resolved_parallelism": dict(self.resolved_parallelism),
            "job": dict(self.job),
            "model": dict(self.model),
            "gpu": dict(self.gpu),
            "disk": self.disk.to_dict(),
            "cost": dict(self.cost),
        }

    def pinned_hyperparameters(self) -> dict[str, Any]:
        """The resolved knobs, ready to copy into hyperparameters to pin this plan."""
        return {k: self.resolved_parallelism[k] for k in PIN_KEYS}

    def lines(self) -> list[str]:
        """Header, plan line, then warnings: what `veri-tui plan` prints."""
        return [*self.header_lines, self.plan_line, *(f"warning: {w}" for w in self.warnings)]

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def __rich__(self) -> str:
        # rich renders a returned str as text; no rich import keeps the core light.
        return str(self)

    def _repr_html_(self) -> str:
        # Notebooks only: the renderer is imported when a record is first shown as HTML.
        from veri_tui.plan.html import record_html

        return record_html(self)
