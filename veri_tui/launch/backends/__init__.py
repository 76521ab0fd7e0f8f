"""The Backend registry: how a job is run, by name, and the one place that chooses between
backends.

A backend is one package holding `BACKEND`, an object of the `Backend` protocol (api.py);
veri_tui/plugins.py names the built-in ones (`direct`, `slurm`: one line each) and finds
the ones other distributions install (the `veri_tui_backends` namespace package). From
their declared options (`Option`: name, type, help, default) come the CLI's flags
(`add_cli_options`, veri_tui/cli.py), the app's launch-screen fields (`options_of`),
veri.toml's `[<name>]` table and the `kind` kept in this machine's job registry
(registry.py). Every choice between backends is made here: `destination` (where a job the
facade was given goes), `backend_of` (a host's or a registry entry's kind), `named`.

The launch sequence (launching.py), the facade (jobs.py, handle.py) and a resume
(restart.py) call a backend's operations; `direct` and `slurm` share their code
(supervised.py). A new backend (Kubernetes, SkyPilot): its package, one line in
plugins.py's BUILTIN or a `veri_tui_backends/<name>/` of its own, and the conformance
suite (tests/backends) passed by it.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from veri_tui.errors import VeriError
from veri_tui.launch.backends.api import AnyBackend, Destination, Option
from veri_tui.plugins import backend_modules

if TYPE_CHECKING:
    from veri_tui.launch.probe.report import ProbeReport
    from veri_tui.plan import JobConfig

__all__ = [
    "Destination", "Option", "add_cli_options", "backend_of", "backends", "destination",
    "add_probe_options", "named", "options_of", "probe", "where_from",
]  # fmt: skip

_BACKENDS: dict[str, AnyBackend] = {}


def _load() -> dict[str, AnyBackend]:
    """The backends, by name, in plugins.py's order (`direct` last: it takes any destination
    no other backend takes)."""
    if not _BACKENDS:
        for module in backend_modules().values():
            backend: AnyBackend = importlib.import_module(module).BACKEND
            _BACKENDS[backend.name] = backend
    return _BACKENDS


def forget() -> None:
    """Find the backends again on next use (a plugin installed meanwhile: tests)."""
    _BACKENDS.clear()


def backends() -> list[AnyBackend]:
    """Every backend, in the order the CLI shows their options (`direct` first)."""
    return sorted(_load().values(), key=lambda b: b.group is not None)


def named(name: str) -> AnyBackend:
    """The backend registered as ``name``; VeriError for an unknown one."""
    found = _load().get(name)
    if found is None:
        raise VeriError(f"{name!r}: no such backend; known: {', '.join(_load())}", key="backend")
    return found


def backend_of(kind: str) -> AnyBackend:
    """The backend whose hosts (or registry entries) are of ``kind``."""
    for backend in _load().values():
        if kind in backend.kinds:
            return backend
    raise VeriError(f"{kind!r}: no backend runs hosts of this kind", key="backend")


def destination(where: object, job: JobConfig | None = None) -> Destination[Any]:
    """Where a job the facade was given goes: the backend that accepts ``where`` (`direct`
    takes what no other does: None for this machine, a host, a list of hosts, with the
    job's own `hosts`), and the destination in its type."""
    for backend in _load().values():
        accepted = backend.accepts(where, job)
        if accepted is not None:
            return Destination(backend, accepted)
    raise VeriError(f"{where!r}: no backend takes this destination", key="backend")


def options_of(name: str) -> tuple[Option, ...]:
    """The options backend ``name`` declares (the app builds its fields from them)."""
    return named(name).options


def add_cli_options(parser: argparse.ArgumentParser, grouped: bool) -> None:
    """Backends' options as flags: ``grouped`` False, those of `direct` (no group) among the
    command's own; True, each other backend's in its own group (its title says where else
    the keys may be given)."""
    for backend in backends():
        if (backend.group is not None) != grouped:
            continue
        group = parser if backend.group is None else parser.add_argument_group(backend.group)
        for opt in backend.options:
            _add(group, opt)


def _add(group: argparse.ArgumentParser | argparse._ArgumentGroup, opt: Option) -> None:
    """``opt`` as a flag: repeatable, on or off (a bool), or one whole number or text."""
    if opt.many:
        group.add_argument(opt.cli_flag, dest=opt.name, help=opt.help, metavar=opt.metavar,
                           action="append")  # fmt: skip
    elif opt.type is bool:
        group.add_argument(opt.cli_flag, dest=opt.name, help=opt.help, action="store_true")
    else:
        group.add_argument(opt.cli_flag, dest=opt.name, help=opt.help, metavar=opt.metavar,
                           type=int if opt.type is int else str)  # fmt: skip


def add_probe_options(parser: argparse.ArgumentParser) -> None:
    """`veri-tui probe`'s flags that name the nodes: each backend's `probe_options`."""
    for backend in backends():
        for opt in backend.probe_options:
            _add(parser, opt)


def probe(values: Mapping[str, object], trust: str | None, ranks_per_node: int | None,
          sizes: Sequence[int] | None) -> ProbeReport:  # fmt: skip
    """`veri-tui probe`: the report of the nodes the values (by option name) name, asked of
    the one backend whose probe options are given (`direct`, asked last: this machine when
    none is). VeriError for two backends given at once, or a bad value."""
    given = [(b, next(o.cli_flag for o in b.probe_options if values.get(o.name)))
             for b in backends() if any(values.get(o.name) for o in b.probe_options)]  # fmt: skip
    if len(given) > 1:
        both = " and ".join(flag for _, flag in reversed(given))
        raise VeriError(f"{both} are two targets; keep one", key=given[-1][0].name)
    for backend in _load().values():
        report = backend.probe_nodes(values, trust, ranks_per_node, sizes)
        if report is not None:
            return report
    raise VeriError("no backend probes these nodes", key="backend")


def where_from(
    values: Mapping[str, object],
    tables: Mapping[str, Mapping[str, object]],
    job: JobConfig | None,
) -> object:
    """Where a job goes from the options given (by option name) and veri.toml's backend
    ``tables`` (by backend name): the one backend's destination, None for this machine.
    VeriError for a bad value, or for two backends given at once."""
    chosen: list[tuple[AnyBackend, object]] = []
    for backend in backends():
        given = {o.name: values.get(o.name) for o in backend.options}
        where = backend.where_from(given, tables.get(backend.name), job)
        if where is not None:
            chosen.append((backend, where))
    if len(chosen) > 1:
        both = " and ".join(b.given_as for b, _ in reversed(chosen))
        raise VeriError(f"{both} are two targets; keep one", key=chosen[-1][0].name)
    return chosen[0][1] if chosen else None
