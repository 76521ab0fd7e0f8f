"""A Slurm launch's options: `--slurm LOGIN --partition P --nodes N --gpus-per-node G
--account A --time T --qos Q --exclude NODES`, or the same keys in veri.toml's `[slurm]`
table (the command line wins). Checked here, before anything is asked of the cluster:
each bad value is one `error: slurm.<key>: ...` line (VeriError).

The keys are spelled once, as the fields of `SlurmOptions`: each field's type is the type
the key takes, its default the key's, and its `KeyDoc` (the field's metadata) how it is
shown (the flag's help and metavar, the app's label and hint). `KEYS` and the `slurm`
backend's declared options (backends/slurm.py: the CLI flags, the app's fields) are read
from them (`keys()`).
"""

from __future__ import annotations

import re
import typing
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, field, fields
from typing import Any, TypeVar, cast

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.contract.record import JobRecord


@dataclass(frozen=True)
class KeyDoc:
    """How a `[slurm]` key is shown: its flag's help and metavar (``flag``: the CLI flag when
    not `--<key with dashes>`), the app's field label and placeholder (None: no field)."""

    help: str
    metavar: str
    flag: str | None = None
    label: str | None = None
    hint: str | None = None


T = TypeVar("T")

# Slurm's --time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch(1)), or UNLIMITED.
_TIME = re.compile(r"^(\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE)$", re.I)
# Names the batch script writes into `#SBATCH` lines: no spaces, quotes or newlines.
_NAME = re.compile(r"^[A-Za-z0-9_.@:+\-]+$")
# sbatch --exclude's node list: names and Slurm's ranges (`n[1-3],n5`).
_NODES = re.compile(r"^[A-Za-z0-9_.\-\[\],]+$")


def _key(doc: KeyDoc, default: T) -> T:
    """A `SlurmOptions` field: its default, and how the key is shown (its metadata)."""
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True)
class SlurmOptions:
    """Where and how a Slurm job is submitted. ``partition`` None: the cluster's default;
    ``gpus_per_node`` None: every GPU of a node (a CPU partition: its cores)."""

    # fmt: off
    login: str = field(metadata={"doc": KeyDoc(
        "submit with sbatch from this login node: ~/.ssh/config alias, user@host[:port], "
        "or local (sbatch on this machine)", "LOGIN", flag="--slurm")})
    partition: str | None = _key(KeyDoc(
        "partition (default: the cluster's default)", "P", label="partition",
        hint="empty: the cluster's default partition"), None)
    nodes: int = _key(KeyDoc(
        "nodes of the allocation (default 1)", "N", label="nodes", hint="1"), 1)
    gpus_per_node: int | None = _key(KeyDoc(
        "ranks per node (default: every GPU of a node; a CPU partition: its cores)", "G",
        label="gpus/node", hint="empty: every GPU of a node (CPU partition: its cores)"), None)
    account: str | None = _key(KeyDoc(
        "sbatch --account", "A", label="account", hint="empty: your default account"), None)
    time: str | None = _key(KeyDoc(
        "time limit, sbatch --time (e.g. 30, 1:30:00)", "T", label="time limit",
        hint="empty: the partition's; e.g. 30, 1:30:00, 2-00:00:00"), None)
    qos: str | None = _key(KeyDoc(
        "sbatch --qos", "Q", label="qos", hint="empty: the default"), None)
    exclude: str | None = _key(KeyDoc(
        "sbatch --exclude: nodes the job must not get (e.g. one the probe refused)", "NODES",
        label="exclude", hint="empty: none; nodes the job must not get, e.g. n[3-4],n9"), None)
    # fmt: on

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Key:
    """One `[slurm]` key, read from its `SlurmOptions` field."""

    name: str
    type: type  # str or int
    default: object
    doc: KeyDoc


def keys() -> list[Key]:
    """Every `[slurm]` key, in `SlurmOptions`' order: its name, type, default and doc."""
    hints = typing.get_type_hints(SlurmOptions)
    return [
        Key(f.name, int if int in (typing.get_args(hints[f.name]) or (hints[f.name],)) else str,
            None if f.default is MISSING else f.default, cast(KeyDoc, f.metadata["doc"]))
        for f in fields(SlurmOptions)
    ]  # fmt: skip


#: `[slurm]` keys and the type each takes (`SlurmOptions`' fields).
KEYS: dict[str, type] = {key.name: key.type for key in keys()}


def slurm_options(
    table: Mapping[str, object] | None, given: Mapping[str, object]
) -> SlurmOptions | None:
    """The options from veri.toml's `[slurm]` ``table`` overridden by the command line's
    ``given`` values (None: not given); None when neither names a login node. Raises
    VeriError with every bad key or value."""
    merged: dict[str, Any] = dict(table or {})
    merged.update({k: v for k, v in given.items() if v is not None})
    problems = [
        Refusal(f"slurm.{k}", f"unknown key; known: {', '.join(KEYS)}")
        for k in merged
        if k not in KEYS
    ]
    for key, kind in KEYS.items():
        value = merged.get(key)
        if value is None:
            continue
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            problems.append(Refusal(f"slurm.{key}", f"{value!r}: give a whole number >= 1"))
        elif kind is str and (
            not isinstance(value, str) or not (_NODES if key == "exclude" else _NAME).match(value)
        ):
            problems.append(
                Refusal(f"slurm.{key}", f"{value!r}: give a name without spaces or quotes")
            )
    time = merged.get("time")
    if isinstance(time, str) and _NAME.match(time) and not _TIME.match(time):
        problems.append(
            Refusal("slurm.time", f"{time!r}: use Slurm's format, e.g. 30, 1:30:00 or 2-00:00:00")
        )
    if problems:
        raise VeriError(problems)
    if not merged.get("login"):
        if len(merged):
            keys = ", ".join(sorted(merged))
            raise VeriError(
                f"{keys} given without a login node; add --slurm LOGIN (or local)", key="slurm"
            )
        return None
    return SlurmOptions(**{k: merged[k] for k in KEYS if merged.get(k) is not None})


def resume_count(record: JobRecord, gpu_count: int | None, nodes: int | None) -> int | None:
    """The rank count of a Slurm job resumed on ``nodes`` nodes: ``gpu_count`` when given,
    else its ranks per node on every new node; None to keep its own."""
    if gpu_count is not None or nodes is None:
        return gpu_count
    if nodes < 1:
        raise VeriError(f"{nodes}: a job runs on at least 1 node", key="nodes")
    spec = record["spec"]
    return nodes * int(spec.get("nproc_per_node") or spec.get("gpu_count") or 1)


def options_for_resume(
    record: JobRecord, gpu_count: int | None, nodes: int | None = None
) -> SlurmOptions:
    """The options a Slurm job was launched with (its spec["slurm"]), for a re-planned
    resume: a new ``gpu_count`` is spread over the same nodes, or over ``nodes``."""
    spec = cast(dict[str, Any], record["spec"])
    given = {k: v for k, v in (spec.get("slurm") or {}).items() if k in KEYS and v}
    if nodes is not None:
        given["nodes"] = nodes
    count = int(given.get("nodes") or 1)
    if gpu_count is not None:
        given["gpus_per_node"] = max(1, gpu_count // count)  # an uneven count: refused
    return SlurmOptions(**given)
