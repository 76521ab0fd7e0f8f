"""Messages that thread workers post back to the UI thread.

Workers never touch widgets: they read files, headers, hosts and job records, then post one
of these small dataclass messages, and the screen that owns the worker updates its widgets
in the handler (on the UI thread). Every message carries the data it reports, not handles:
the planning core's typed records (`ModelInfo`) as they are, job.json records as the dicts
the launch facade reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.message import Message

if TYPE_CHECKING:
    from veri_tui.jobfolder.contract.record import JobRecord
    from veri_tui.plan import ModelInfo


@dataclass
class FirstPlanRead(Message):
    """The start-up helper's answer (veri_tui.app.first_plan.result): None if it failed."""

    answer: dict[str, str] | None


@dataclass
class ModelInfoRead(Message):
    """The safetensors headers of `model` were read (info set) or could not be (error set);
    model None is the bundled tiny model."""

    model: str | None
    info: ModelInfo | None = None
    error: str | None = None


@dataclass
class TokensCounted(Message):
    """The dataset's tokens were counted (into the planning core's cache) or could not be
    (the core remembers why): the plan editor re-plans to show the cost."""

    key: tuple[str, str | None, str]  # (dataset, model path, method)


@dataclass
class ModelsListed(Message):
    """Candidate models for the picker: rows of (source, name, detail)."""

    rows: list[tuple[str, str, str]] = field(default_factory=list)


@dataclass
class JobUpdate(Message):
    """A snapshot of a job: its record, new log lines since the last update, new metrics."""

    job_id: str
    record: JobRecord | None
    lines: list[str] = field(default_factory=list)
    metrics: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


@dataclass
class JobsListed(Message):
    """The job records found locally and on the configured hosts."""

    jobs: list[JobRecord] = field(default_factory=list)
    error: str | None = None


@dataclass
class HostsListed(Message):
    """Host aliases found in ~/.ssh/config (the launch screen's target list)."""

    hosts: list[str] = field(default_factory=list)
    error: str | None = None


@dataclass
class PreflightDone(Message):
    """Preflight checks for a target: (name, ok, detail) rows, or a refusal."""

    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    error: str | None = None
    host_key: tuple[str, str] | None = None  # (host, fingerprint) of an unknown host key


@dataclass
class Launched(Message):
    """The launcher started a job (job_id set) or refused it (error set)."""

    job_id: str | None = None
    error: str | None = None
    host_key: tuple[str, str] | None = None
