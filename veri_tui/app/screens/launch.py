"""The launch screen: target, scheduler, the scheduler's fields, dataset, output, preflight,
host-key trust, confirm. The schedulers are the backend registry's (veri_tui/launch/backends),
each with the fields its options declare (widgets/backend_fields.py); the target fills the
option a backend marks as its target. `direct`: with more hosts the job runs on every host
named, one node each, the target first (node 0): the preflight shows every node's rows
(`node 1 (b): ...`) and the layout (`nodes: 2 x 1 GPU (a, b)`), and Launch starts the
multi-node job. `slurm`: the target is the login node (`local`: sbatch on this machine), the
job submitted for the partition, nodes and limits its fields give, planned for the
partition's GPUs, and the monitor shows why it waits while Slurm keeps it pending
(docs/slurm.md). All through the launch facade. A backend's fields and the dataset are
checked on Enter, not on every key (each check opens SSH sessions to every host, asks the
cluster, or reads the whole dataset).

Canary (^k) launches the same job with a canary and the canary line's limits
(widgets/canary_fields.py, docs/canary.md). The dataset and output fields start with the
editor's values: the preflight checks what they show. Preflight and launch run in thread
workers (files, SSH, processes); an unknown host key opens the trust dialog (host_key.py) and
the fingerprint accepted goes to the launcher (`trust_host`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Footer, Input, Label, Select, Static
from textual.worker import get_current_worker

from veri_tui import plan as core
from veri_tui.app.messages import HostsListed, Launched, PreflightDone
from veri_tui.app.screens.host_key import TrustAsker, host_key_of
from veri_tui.app.widgets.backend_fields import BackendFields, FieldValues, schedulers
from veri_tui.app.widgets.canary_fields import CanaryFields
from veri_tui.app.widgets.knob_form import FormValues
from veri_tui.errors import VeriError
from veri_tui.launch import jobs

if TYPE_CHECKING:
    from veri_tui.app.app import VeriApp
    from veri_tui.launch.jobs import Where

LOCAL = "local"
DATA_HINT = "file, save_to_disk folder or Hub id (empty: bundled sample); enter checks it"
OUT_HINT = "empty: <job folder>/output"
#: The scheduler choices: the backend registry's, `direct` first.
SCHEDULERS = schedulers()
#: The two the facade's `where_of` returns: (backend, its fields' values).
Choice = tuple[str, FieldValues]


class LaunchScreen(TrustAsker, Screen[None]):
    """Confirm where and on what the planned job runs, then start it."""

    BINDINGS = [
        Binding("ctrl+l", "confirm", "Launch now"),
        Binding("ctrl+k", "canary", "Canary first"),
        Binding("ctrl+r", "preflight", "Re-check"),
        Binding("escape", "app.pop_screen", "Back"),
    ]

    def __init__(self, fields: FormValues, info: core.ModelInfo | None) -> None:
        super().__init__()
        self.fields = fields
        self.info = info
        self.ready = False

    def compose(self) -> ComposeResult:
        with Vertical(id="launch-form"):
            yield Static("Launch", classes="form-section", markup=False)
            with Horizontal(classes="field-line"):
                yield Label("target", classes="field-label")
                yield Select([(LOCAL, LOCAL)], value=LOCAL, allow_blank=False, id="target")
            with Horizontal(classes="field-line"):
                yield Label("scheduler", classes="field-label")
                yield Select(SCHEDULERS, value=SCHEDULERS[0][1], allow_blank=False, id="scheduler")
            for _, name in SCHEDULERS:
                yield BackendFields(name)
            with Horizontal(classes="field-line"):
                yield Label("dataset", classes="field-label")
                yield Input(self._given("dataset"), placeholder=DATA_HINT, id="dataset")
            with Horizontal(classes="field-line"):
                yield Label("output dir", classes="field-label")
                yield Input(self._given("output"), placeholder=OUT_HINT, id="output")
            yield CanaryFields(classes="field-line")
            yield Static("Preflight", classes="form-section", markup=False)
            yield Static("checking...", id="preflight", markup=False)
            with Horizontal(id="launch-actions"):
                yield Button("Launch ^l", id="confirm", variant="primary", disabled=True)
                yield Button("Canary ^k", id="canary", disabled=True)
                yield Button("Back esc", id="back")
        yield Footer()

    def on_mount(self) -> None:
        self._show_fields()
        self.list_hosts()
        self.action_preflight()

    # -- inputs ------------------------------------------------------------------------

    @work(thread=True, group="hosts")
    def list_hosts(self) -> None:
        """Host aliases from the SSH client config (wildcard patterns are not targets)."""
        try:
            self.post_message(HostsListed(jobs.host_aliases()))
        except (OSError, VeriError) as exc:
            self.post_message(HostsListed(error=str(exc)))

    def on_hosts_listed(self, message: HostsListed) -> None:
        options = [(LOCAL, LOCAL)] + [(h, h) for h in message.hosts]
        self.query_one("#target", Select).set_options(options)

    def _given(self, key: str) -> str:  # the field starts with what the preflight checks
        return str(self.fields.get(key) or "")

    def job_fields(self) -> FormValues:
        """The editor's fields with this screen's dataset and output (emptied: the default).
        With Slurm the partition's GPUs (gres or the Slurm fields' type; nodes x GPUs per
        node) replace the editor's gpu and gpu_count (a backend that `allocates` the nodes)."""
        out = dict(self.fields)
        for key in ("dataset", "output"):
            value = self.query_one(f"#{key}", Input).value.strip()
            out.pop(key, None)
            if value:
                out[key] = value
        if jobs.backend_named(self.scheduler).allocates:
            out.pop("gpu_count", None)
            out.pop("gpu", None)
            gpu = self.fields_shown.gpu()
            out.update({"gpu": gpu} if gpu else {})
        return out

    @property  # TrustAsker's `host` attribute, read here from the target selector
    def host(self) -> str | None:  # type: ignore[override]
        value = self.query_one("#target", Select).value
        return None if value in (LOCAL, Select.BLANK) else str(value)

    @property
    def scheduler(self) -> str:
        """The backend chosen."""
        return str(self.query_one("#scheduler", Select).value)

    @property
    def fields_shown(self) -> BackendFields:
        return self.query_one(f"#{self.scheduler}-fields", BackendFields)

    @property
    def hosts(self) -> list[str]:
        """Every node's host the fields name, node 0 (the target) first; empty for this
        machine. With Slurm only the login node, an SSH host (empty: sbatch here)."""
        return self.fields_shown.hosts(self.host)

    def choice(self) -> Choice:
        """The backend chosen and its fields' values, for the facade's `where_of`."""
        return self.scheduler, self.fields_shown.values(self.host)

    def _show_fields(self) -> None:  # the chosen backend's fields alone
        for fields in self.query(BackendFields).results(BackendFields):
            fields.display = fields.backend == self.scheduler

    @on(Input.Changed)
    @on(Select.Changed)
    def _inputs_changed(self, event: Input.Changed | Select.Changed) -> None:
        if event.control.id == "scheduler":
            self._show_fields()
        on_enter = event.control.id == "dataset" or "backend-field" in event.control.classes
        if not on_enter:
            self.action_preflight()
            return
        if "canary-field" in event.control.classes:
            return  # judged by the gate, not by the preflight
        # Checked on Enter: each check asks every host or the cluster, or reads (and hashes)
        # the dataset; a half-typed path (`/`, `/tmp`) is not worth walking.
        self.ready = False
        self._enable(False)
        self.query_one("#preflight", Static).update("enter: check these settings")

    @on(Input.Submitted, "#dataset, .backend-field")
    def _more_submitted(self) -> None:
        self.action_preflight()

    # -- preflight ---------------------------------------------------------------------

    def local_plan(self, job: core.JobConfig, host: str | None) -> core.PlanRecord | None:
        """The plan made here; None for a host (the SSH side plans for its GPUs and paths,
        as `launch --host`) or without the model's counts (the facade says why)."""
        if host is not None or self.info is None:
            return None
        return core.plan_job(job, self.info)

    def _enable(self, ready: bool) -> None:  # Launch and Canary: once the preflight passed
        for button in ("#confirm", "#canary"):
            self.query_one(button, Button).disabled = not ready

    def action_preflight(self) -> None:
        self.ready = False
        self._enable(False)
        self.query_one("#preflight", Static).update("checking...")
        self.preflight(self.job_fields(), self.hosts, self.choice())

    def _where(self, job: core.JobConfig, choice: Choice
               ) -> tuple[Where, core.PlanRecord | None]:  # fmt: skip
        """Where the facade sends the job (the backend's destination; None: this machine)
        and the plan made here (none elsewhere: planned for what the hosts or the partition
        have)."""
        where = jobs.where_of(*choice)
        return where, self.local_plan(job, None) if where is None else None

    @work(thread=True, exclusive=True, group="preflight")
    def preflight(self, fields: FormValues, hosts: list[str], choice: Choice) -> None:
        """The launch facade's preflight where the chosen backend's fields send the job
        (``hosts``: the SSH hosts they name, none for this machine); each row is (check, ok,
        detail), every node's labelled by its node."""
        checks: list[tuple[str, bool, str]] = []
        try:
            job = core.job_from_fields(fields)
            trust = self._trust(hosts) if hosts else None
            where, plan = self._where(job, choice)
            checks = jobs.preflight(job, plan, host=where, trust_host=trust)
        except VeriError as exc:
            key = host_key_of(exc)
            if key is not None:
                self.post_message(PreflightDone(checks, error=str(exc), host_key=key))
                return
            checks += [(e.key, False, e.message) for e in exc.errors]
        if not get_current_worker().is_cancelled:  # a newer check replaced this one
            self.post_message(PreflightDone(checks))

    def on_preflight_done(self, message: PreflightDone) -> None:
        if message.host_key is not None:
            host, fingerprint = message.host_key
            self.query_one("#preflight", Static).update(
                f"FAIL host: {host} is not in known_hosts (key {fingerprint}); "
                "not trusted yet, ctrl+r asks again"
            )
            self._ask_trust(host, fingerprint, then=self.action_preflight)
            return
        rows = map(jobs.row_text, message.checks)  # ok, WARN (runs, not as planned), FAIL
        self.query_one("#preflight", Static).update("\n".join(rows))
        self.ready = bool(message.checks) and all(ok for _, ok, _ in message.checks)
        self._enable(self.ready)

    # -- launch ------------------------------------------------------------------------

    def action_confirm(self, canary: dict[str, Any] | None = None) -> None:
        if not self.ready:
            self.notify("preflight has not passed", severity="error")
            return
        self._enable(False)
        self.notify("launching with a canary..." if canary else "launching...")
        self.start(self.job_fields(), self.hosts, self.choice(), canary)

    def action_canary(self) -> None:
        try:
            canary = self.query_one(CanaryFields).canary()
        except VeriError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return
        self.action_confirm(canary)

    @work(thread=True, exclusive=True, group="launch")
    def start(self, fields: FormValues, hosts: list[str], choice: Choice,
              canary: dict[str, Any] | None = None) -> None:  # fmt: skip
        """The launch facade's launch where the chosen backend's fields send it: here, on
        one host, one node on each host, or submitted to Slurm."""
        try:
            job = core.job_from_fields(fields)
            trust = self._trust(hosts) if hosts else None
            where, record = self._where(job, choice)
            job_id = jobs.launch(job, record, host=where, trust_host=trust, canary=canary)
            self.post_message(Launched(job_id))
        except VeriError as exc:
            self.post_message(
                Launched(error="; ".join(map(str, exc.errors)), host_key=host_key_of(exc))
            )

    def on_launched(self, message: Launched) -> None:
        if message.host_key is not None:
            self._ask_trust(*message.host_key, then=self.action_confirm)
            return
        if message.error or not message.job_id:
            self.notify(message.error or "launch failed", severity="error", timeout=10)
            self._enable(self.ready)
            return
        self.app.pop_screen()
        cast("VeriApp", self.app).open_monitor(message.job_id)  # the app that opened us

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:  # the buttons' own actions
        if event.button.id == "confirm":
            self.action_confirm()
        elif event.button.id == "canary":
            self.action_canary()
        elif event.button.id == "back":
            self.app.pop_screen()
