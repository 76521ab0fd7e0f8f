"""The launch screen's fields of one backend: the options it declares with an app label
(`Option.label`, veri_tui/launch/backends), built from the registry as the command line's
flags are, so a backend's package adds its fields without a line here.

`direct`'s is `more hosts` (the nodes after the target: a multi-node job); `slurm`'s are
partition, nodes, GPUs per node, account, time, qos and the nodes to exclude, and, because
its scheduler allocates the nodes (`allocates`), a GPU type: the job is then planned for
the partition's GPUs (docs/slurm.md), the editor's gpu and gpu_count giving way to the
partition's gres type (or the type named here, the way out for one the catalog does not
know) and nodes x GPUs per node. Empty fields are left to the backend (this machine alone;
the cluster's default partition, every GPU of a node, no account, ...). The values are
checked by the backend's own `where_from` (the facade's `where_of`), so a bad one is the
same `<backend>.<key>` line as on the command line; a field is checked on Enter, not on
every key (each check asks every host, or the cluster, over SSH for a login node).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Label

from veri_tui.launch import jobs
from veri_tui.launch.jobs import Option

#: The GPU type field of a backend whose scheduler allocates the nodes.
GPU_FIELD = ("gpu", "GPU type", "empty: the partition's gres type; a catalog name, e.g. H100-80GB")
#: What a backend's fields give `where_of`: by option name, a whole number, text, a list of
#: hosts, or None (empty).
FieldValues = dict[str, object]


def fields_of(name: str) -> list[tuple[str, str, str]]:
    """Backend ``name``'s app fields, (key, label, placeholder) in the order shown: its
    options with a label, then the GPU type when it allocates the nodes."""
    out = [(o.name, o.label, o.hint or "") for o in jobs.backend_options(name) if o.label]
    return out + ([GPU_FIELD] if jobs.backend_named(name).allocates else [])


def schedulers() -> list[tuple[str, str]]:
    """The app's scheduler choices, (label, backend name), `direct` first: every backend
    with a field (one that declares no app field, as a test's plugin, has no destination the
    screen could give)."""
    return [
        (f"{b.name}: {b.summary}" if b.summary else b.name, b.name)
        for b in jobs.backends_shown()
        if any(o.label or o.target for o in b.options)
    ]


class BackendFields(Vertical):
    """One backend's options as typed; `values()` gives them for the facade's `where_of`."""

    DEFAULT_CSS = "BackendFields { height: auto; }"

    def __init__(self, backend: str) -> None:
        super().__init__(id=f"{backend}-fields")
        self.backend = backend
        self.declared: dict[str, Option] = {o.name: o for o in jobs.backend_options(backend)}

    def compose(self) -> ComposeResult:
        for key, label, hint in fields_of(self.backend):
            with Horizontal(classes="field-line"):
                yield Label(label, classes="field-label")
                yield Input(placeholder=hint, id=f"{self.backend}-{key}", classes="backend-field")

    def _typed(self, opt: Option) -> str:
        return (
            self.query_one(f"#{self.backend}-{opt.name}", Input).value.strip() if opt.label else ""
        )

    def _hosts_of(self, opt: Option, target: str | None) -> list[str]:
        """A many target option's hosts: the target first, then those typed (once each)."""
        named = ([target] if target else []) + self._typed(opt).replace(",", " ").split()
        return list(dict.fromkeys(named))

    def values(self, target: str | None) -> FieldValues:
        """What was typed, by option name, with the screen's ``target`` (None: this machine)
        in the option it fills. A whole number is passed as one; anything else as typed, so
        the backend refuses it with the command line's message."""
        out: FieldValues = {}
        for opt in self.declared.values():
            text = self._typed(opt)
            if opt.target and opt.many:
                out[opt.name] = self._hosts_of(opt, target)
            elif opt.target:
                out[opt.name] = target or "local"
            elif opt.label:
                out[opt.name] = int(text) if opt.type is int and text.isdigit() else text or None
        return out

    def hosts(self, target: str | None) -> list[str]:
        """The hosts the fields name, node 0 (the target) first; empty for this machine."""
        for opt in self.declared.values():
            if opt.target and opt.many:
                return self._hosts_of(opt, target)
        return [target] if target else []

    def gpu(self) -> str | None:
        """The GPU type typed (None: the partition's, or no such field)."""
        found = self.query(f"#{self.backend}-gpu").results(Input)
        return next((f.value.strip() for f in found), None) or None
