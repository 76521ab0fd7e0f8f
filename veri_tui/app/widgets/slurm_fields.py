"""The launch screen's Slurm fields: partition, nodes, GPUs per node, account, time, qos,
the nodes to exclude, and the GPU type.

Shown when the launch screen's scheduler is Slurm: the job is then submitted with sbatch
from the target (this machine, or an SSH host as the login node), planned for the
partition's GPUs (docs/slurm.md): the editor's gpu and gpu_count give way to the
partition's gres type (or the GPU type named here, the way out for a type the catalog does
not know) and nodes x GPUs per node. Empty fields are left to the cluster (its default
partition, every GPU of a node, no account, the partition's time limit, no node left out).
The values are checked by the launch facade's `slurm_options`, so a bad one is the same
`slurm.<key>` line as on the command line (the fields are the options the `slurm` backend declares,
veri_tui/launch/backends/slurm.py, as the command line's flags are); a field is checked on
Enter, not on every key (each check asks the cluster, over SSH for a login node).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Label

from veri_tui.launch import jobs

#: (key, label, placeholder), in the order shown: the `slurm` backend's declared options
#: that are app fields (the login node is the screen's target), then the GPU type.
FIELDS = tuple(
    (o.name, o.label, o.hint or "") for o in jobs.backend_options("slurm") if o.label is not None
) + (("gpu", "GPU type", "empty: the partition's gres type; a catalog name, e.g. H100-80GB"),)
#: The fields as typed, by `[slurm]` key: a whole number, text, or None (empty).
SlurmValues = dict[str, str | int | None]
#: Keys Slurm takes as whole numbers.
WHOLE = tuple(o.name for o in jobs.backend_options("slurm") if o.type is int)


class SlurmFields(Vertical):
    """The Slurm options as typed; `values()` gives them for `slurm_options`."""

    DEFAULT_CSS = "SlurmFields { height: auto; }"

    def compose(self) -> ComposeResult:
        for key, label, hint in FIELDS:
            with Horizontal(classes="field-line"):
                yield Label(label, classes="field-label")
                yield Input(placeholder=hint, id=f"slurm-{key}", classes="slurm-field")

    def values(self, login: str) -> SlurmValues:
        """What was typed, by `[slurm]` key, with ``login`` (None for an empty field).

        A whole number is passed as one; anything else as typed, so `slurm_options` refuses
        it with the command line's message."""
        out: SlurmValues = {"login": login}
        for key, _, _ in FIELDS[:-1]:
            text = self.query_one(f"#slurm-{key}", Input).value.strip()
            out[key] = int(text) if key in WHOLE and text.isdigit() else text or None
        return out

    def gpu(self) -> str | None:
        """The GPU type typed (None: the partition's)."""
        return self.query_one("#slurm-gpu", Input).value.strip() or None
