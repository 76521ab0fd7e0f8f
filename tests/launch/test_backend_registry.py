"""The backend registry (veri_tui/launch/backends): each backend's declared options are the
CLI's flags and the app's scheduler fields, where a job goes is read from them (two backends at
once refused in one line), and no module outside the registry chooses between backends by
kind or type; a backend's `submit` gives the typed handle of the nodes it started (or
`SubmitError` naming them), kept in the registry's entry shape. Fast: no job is launched
(each supervisor started finds no job.json and exits), no cluster or sshd is asked."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from veri_tui.cli import main
from veri_tui.errors import VeriError
from veri_tui.jobfolder.contract.procs import pid_alive
from veri_tui.launch import backends
from veri_tui.launch.backends.ref import JobRef, SubmitError
from veri_tui.launch.local_host import LocalHost
from veri_tui.launch.local_machine import reap

ROOT = Path(__file__).resolve().parents[2]
#: A choice between backends outside the registry: the issue's grep (`kind ==`,
#: `isinstance(.*Slurm`) on a host's, entry's or node's kind attribute (a local variable
#: named kind, as export's artifact kind, is not a backend's).
DISPATCH = re.compile(r"\.kind\s*[!=]=|isinstance\(.*Slurm")


@pytest.mark.parametrize("command", ["plan", "launch"])
def test_every_declared_option_is_a_flag(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    shown = capsys.readouterr().out
    for backend in backends.backends():
        if backend.group is not None:
            assert f"\n{backend.group}:\n" in shown
        for option in backend.options:
            assert f"  {option.cli_flag} {option.metavar}" in shown, option


def test_the_probes_flags_are_the_backends_probe_options(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["probe", "--help"])
    shown = capsys.readouterr().out
    for backend in backends.backends():
        for option in backend.probe_options:
            assert f"  {option.cli_flag}" in shown, option
    assert {o.name for b in backends.backends() for o in b.probe_options} >= {"host", "slurm"}


def test_the_apps_schedulers_and_fields_are_the_backends_options() -> None:
    from veri_tui.app.widgets.backend_fields import GPU_FIELD, fields_of, schedulers

    assert schedulers() == [("direct: torchrun on the target", "direct"),
                            ("slurm: sbatch from the target", "slurm")]  # fmt: skip
    for backend in backends.backends():
        declared = [(o.name, o.label, o.hint or "") for o in backend.options if o.label]
        assert fields_of(backend.name) == declared + ([GPU_FIELD] if backend.allocates else [])
    assert [f[0] for f in fields_of("direct")] == ["host"]
    assert [f[0] for f in fields_of("slurm")] == [
        "partition", "nodes", "gpus_per_node", "account", "time", "qos", "exclude", "gpu"
    ]  # fmt: skip


def test_two_backends_at_once_are_one_line(capsys, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    code = main(["plan", "--slurm", "local", "--host", "somewhere"])
    err = capsys.readouterr().err
    assert code == 2 and err == (
        "error: slurm: --slurm and --host (or veri.toml's hosts) are two targets; keep one\n"
    )


def test_a_backend_table_that_is_not_a_table_is_one_line(capsys, tmp_path: Path) -> None:
    config = tmp_path / "veri.toml"
    config.write_text('slurm = "login"\n')
    code = main(["plan", str(config)])
    err = capsys.readouterr().err
    assert code == 2
    assert (
        err == f"error: slurm: {config}: [slurm] must be a table (login = ..., partition = ...)\n"
    )


def test_destinations_and_kinds_find_their_backend() -> None:
    slurm = backends.where_from({"login": "local", "partition": "debug"}, {}, None)
    assert backends.destination(slurm).backend.name == "slurm"
    assert backends.destination(slurm).names == ["local"]
    found = [backends.destination(w) for w in (None, "h", ["a", "b"])]
    assert [d.backend.name for d in found] == ["direct"] * 3
    assert [d.names for d in found] == [[], ["h"], ["a", "b"]]
    assert [backends.backend_of(k).name for k in ("local", "ssh", "slurm")] == [
        "direct", "direct", "slurm"]  # fmt: skip
    assert backends.backend_of("slurm").label("login") == "slurm:login"
    with pytest.raises(VeriError, match="no backend runs hosts of this kind"):
        backends.backend_of("k8s")


def test_no_dispatch_on_backends_outside_the_registry() -> None:
    """Every package of veri_tui (the app, the planner and the job side included), but the
    backends' own; `__getattr__` outside the trainer, whose comments name nn.Module's and
    whose fake CUDA device forwards by it."""
    found = []
    for py in sorted((ROOT / "veri_tui").rglob("*.py")):
        parts = py.relative_to(ROOT).parts
        if "backends" in parts:
            continue
        text = py.read_text(encoding="utf-8")
        found += [f"{py.relative_to(ROOT)}: {ln.strip()}" for ln in text.splitlines()
                  if DISPATCH.search(ln) or ("__getattr__" in ln and "trainer" not in parts)
                  ]  # fmt: skip
    assert found == []


def test_slurm_keys_are_spelled_once_as_slurm_options_fields() -> None:
    """`[slurm]`'s keys, their types and defaults: SlurmOptions' fields are the source of
    the checked keys (KEYS) and of the slurm backend's declared options (flags, app)."""
    from dataclasses import MISSING, fields

    from veri_tui.launch.slurm.options import KEYS, SlurmOptions

    declared = backends.options_of("slurm")
    names = [f.name for f in fields(SlurmOptions)]
    assert list(KEYS) == names == [o.name for o in declared]
    assert [o.type for o in declared] == list(KEYS.values())
    assert KEYS["nodes"] is int and KEYS["gpus_per_node"] is int and KEYS["login"] is str
    defaults = [None if f.default is MISSING else f.default for f in fields(SlurmOptions)]
    assert [o.default for o in declared] == defaults
    with pytest.raises(VeriError, match="unknown key; known: " + ", ".join(names)):
        backends.where_from({}, {"slurm": {"login": "l", "gres": "x"}}, None)


@pytest.mark.parametrize("hosts", [["h"], ["a", "b"]])
def test_a_submitted_jobs_handle_is_its_registry_entry(hosts: list[str], tmp_path: Path,
                                                       monkeypatch) -> None:  # fmt: skip
    """The typed handle a backend's submit returns is kept as registry entries always were
    (node 0 at the top, `nodes` for several), and an entry read back is the same handle; an
    entry written before handles were strings (each node's `pid`, an int) reads as one."""
    import json

    from veri_tui.launch import jobindex, registry
    from veri_tui.launch.backends.ref import NodeRef

    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    nodes = tuple(NodeRef(h, f"/j/{h}", str(100 + k)) for k, h in enumerate(hosts))
    ref = JobRef("direct", "ssh", "20260101-000000-abcd", nodes)
    registry.save(jobindex.entry_of(ref, "python3", {"job_id": ref.job_id}))
    saved = json.loads(registry.entry_path(ref.job_id).read_text())
    assert set(saved) == {"job_id", "host", "job_dir", "handle", "python", "record", "nodes",
                          "retry_refused", "watcher", "kind"}  # fmt: skip
    assert (saved["host"], saved["job_dir"], saved["handle"]) == (hosts[0], f"/j/{hosts[0]}",
                                                                  "100")  # fmt: skip
    many = [{"host": h, "job_dir": f"/j/{h}", "handle": str(100 + k)} for k, h in enumerate(hosts)]
    assert saved["nodes"] == (many if len(hosts) > 1 else None)
    entry = registry.load(ref.job_id)
    assert entry is not None and jobindex.ref_of(entry) == ref
    assert jobindex.ref_of(entry).started(["7"] * len(hosts)).handles == ["7"] * len(hosts)
    # As an earlier release wrote it: `pid` ints.
    old = {k: v for k, v in saved.items() if k != "handle"} | {"pid": 100}
    if old["nodes"]:
        old["nodes"] = [{"host": h, "job_dir": f"/j/{h}", "pid": 100 + k}
                        for k, h in enumerate(hosts)]  # fmt: skip
    registry.entry_path(ref.job_id).write_text(json.dumps(old))
    entry = registry.load(ref.job_id)
    assert entry is not None and jobindex.ref_of(entry) == ref


def _gone(pid: int) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reap()
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return False


def test_submit_returns_every_nodes_handle(tmp_path: Path) -> None:
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    direct = backends.named("direct")
    ref = direct.submit("j1", [LocalHost(), LocalHost()], [str(d) for d in dirs])
    assert isinstance(ref, JobRef) and (ref.backend, ref.kind, ref.job_id) == (
        "direct", "local", "j1")  # fmt: skip
    assert [n.job_dir for n in ref.nodes] == [str(d) for d in dirs]
    assert all(isinstance(h, str) and h.isdigit() for h in ref.handles), ref
    assert all(_gone(int(h)) for h in ref.handles if h is not None)
    assert all((d / "supervisor.log").is_file() for d in dirs)  # each one's output


def test_a_node_that_cannot_start_is_named_in_the_error(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.mkdir()
    direct = backends.named("direct")
    with pytest.raises(SubmitError) as caught:
        direct.submit("j2", [LocalHost(), LocalHost()], [str(good), str(tmp_path / "none")])
    ref = caught.value.ref
    assert ref.nodes[0].handle is not None and ref.nodes[1].handle is None, ref
    assert isinstance(caught.value.cause, FileNotFoundError), caught.value.cause
    assert _gone(int(ref.nodes[0].handle))
