"""Building a JobConfig from a veri.toml, command-line options, `--set` pairs or a form.

All problems are collected and raised together as one VeriError, each naming its key (or
the file and line) and the fix. Unknown keys name the closest known key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.knobs.rules import aliases, canonical, keeps_text
from veri_tui.jobfolder.knobs.schema import by_name
from veri_tui.plan.knobmodel import KnobErrors
from veri_tui.plan.knobs import JOB_KEYS, Hyperparameters, JobConfig
from veri_tui.plugins import backend_modules

ALIASES = aliases(Hyperparameters)  # batch_size -> micro_batch_size
HP_KEYS = tuple(sorted(set(Hyperparameters.knob_table) | set(ALIASES)))
ALL_KEYS = tuple(sorted(set(HP_KEYS) | set(JOB_KEYS)))
KNOBS = {**by_name(JobConfig), **by_name(Hyperparameters)}


def _closest(key: str, known: Sequence[str] = ALL_KEYS) -> str | None:
    import difflib  # only on errors: keeps `veri-tui plan` startup lean

    match = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return match[0] if match else None


def closest_key(key: str, known: Sequence[str] = ALL_KEYS) -> str:
    """The way out for a misspelt key: 'did you mean X?' or the list of keys."""
    match = _closest(key, known)
    if match:
        return f"unknown key; did you mean {match!r}?"
    return "unknown key; see `veri-tui plan --help` and docs/planning.md for the known keys"


def parse_value(text: str, key: str = "") -> Any:
    """Type a `--set` value the way TOML would (16 -> int, false -> bool), else keep text.

    `none`/`null` mean "not set", except where they are one of the knob's own values
    (`activation_checkpointing=none`: the mode), which stay text."""
    raw = text.strip()
    if keeps_text(KNOBS.get(key), raw):
        return raw
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if raw.lower() in ("none", "null"):
        return None
    import tomllib  # only when a --set is given: keeps `veri-tui plan` startup lean

    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def parse_sets(sets: Sequence[str]) -> tuple[dict[str, Any], list[Refusal]]:
    """`KEY=VALUE` pairs into a dict; malformed pairs become errors."""
    out: dict[str, Any] = {}
    errors: list[Refusal] = []
    for item in sets:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            errors.append(Refusal("--set", f"{item!r}: expected KEY=VALUE, e.g. lora_rank=16"))
            continue
        out[key] = parse_value(value, key)
    return out, errors


def read_toml(path: Path) -> dict[str, Any]:
    """A veri.toml as a dict; unreadable or invalid files raise one error naming the file."""
    import tomllib  # only when a config file is given

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise VeriError(Refusal(str(path), f"cannot read: {exc.strerror or exc}")) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        msg = f"not UTF-8 text (byte {exc.start}); save the file as UTF-8"
        raise VeriError(Refusal(str(path), msg)) from None
    except tomllib.TOMLDecodeError as exc:
        raise VeriError(Refusal(str(path), f"invalid TOML: {exc}")) from None


def _split_fields(fields: Mapping[str, Any], errors: list[Refusal]) -> dict[str, Any]:
    """Mixed job + hyperparameter fields into JobConfig's nested shape; unknown keys -> errors."""
    job: dict[str, Any] = {}
    hp: dict[str, Any] = {}
    for key, value in fields.items():
        if key in JOB_KEYS:
            job[key] = value
        elif key in HP_KEYS:
            hp[key] = value
        else:
            errors.append(Refusal(key, closest_key(key)))
    hp, clashes = canonical(hp, Hyperparameters)
    for k in clashes:
        msg = f"{k.alias} is an alias of {k.name}; set only {k.name}"
        errors.append(Refusal(k.alias, msg))
    job["hyperparameters"] = hp
    return job


def _knob_errors(exc: KnobErrors) -> list[Refusal]:
    """One Refusal per refused value, keyed by the knob (not the nested path)."""
    out = []
    for err in exc.errors():
        loc = [str(p) for p in err["loc"] if p != "hyperparameters"]
        key = loc[0] if loc else "input"
        value = err.get("input")
        shown = f" (got {value!r})" if not isinstance(value, dict) else ""
        out.append(Refusal(key, f"{err['msg']}{shown}"))
    return out


def _parse(fields: Mapping[str, Any]) -> tuple[JobConfig | None, list[Refusal]]:
    """(the job, or None when a value does not parse; every type error and unknown key)."""
    errors: list[Refusal] = []
    cleaned = {k: v for k, v in fields.items() if v is not None and v != ""}
    nested = _split_fields(cleaned, errors)
    try:
        job = JobConfig.from_dict(nested)
    except KnobErrors as exc:
        errors.extend(_knob_errors(exc))
        return None, errors
    return job, errors


def _rules_on_the_rest(
    fields: Mapping[str, Any], errors: list[Refusal], unknown: Sequence[str] = ()
) -> list[Refusal]:
    """The submit refusals of the keys that did parse, so all refusals show together
    (`--set zero_stage=1 --set gloabl_batch_size=3` names both). The failed keys, the keys
    an unknown one most likely meant and the `unknown` ones (their values are not known) are
    left out, with every rule that reads them."""
    from veri_tui.plan.validate import validate_parsed

    failed = {e.key for e in errors} | set(unknown)
    failed |= {m for k in fields if k not in ALL_KEYS and (m := _closest(k)) is not None}
    failed |= {name for alias, name in ALIASES.items() if alias in failed}
    rest = {k: v for k, v in fields.items() if k in ALL_KEYS and k not in failed}
    job, again = _parse(rest)
    return validate_parsed(job, failed) if job is not None and not again else []


def job_from_fields(fields: Mapping[str, Any]) -> JobConfig:
    """A JobConfig from raw values as typed in a form: job fields and knobs at top level.

    Empty strings and None mean "not set" (the default applies). Raises VeriError with every
    type error and unknown key found, plus the submit refusals of the keys that did parse
    (a job that parses whole is returned: `validate` gives its refusals).
    """
    job, errors = _parse(fields)
    if errors or job is None:
        raise VeriError(errors + _rules_on_the_rest(fields, errors))
    return job


def load_job_config(
    config_path: str | Path | None = None,
    *,
    model: str | None = None,
    method: str | None = None,
    gpu: str | None = None,
    gpu_count: int | None = None,
    dataset: str | list[str] | None = None,
    output: str | None = None,
    sets: Sequence[str] = (),
) -> JobConfig:
    """A JobConfig from a veri.toml (job keys on top, knobs under [method]) plus options.

    Precedence: `--set` over command-line options over the file. Relative paths in the file
    (model, dataset, output) are taken relative to the file's folder.
    """
    fields: dict[str, Any] = {}
    errors: list[Refusal] = []
    if config_path is not None:
        path = Path(config_path)
        data = read_toml(path)
        # A backend's `[<name>]` table (`[slurm]`) is where the job is submitted, not what it
        # is: the launch side reads it (commands/common.py hosts_of: the backend registry's
        # options); the plan is the same without it.
        for name in backend_modules():
            data.pop(name, None)
        section = data.pop("method", None)
        if isinstance(section, dict):
            # [method] may carry `name = "dpo"` (or `type`) to pick the method in the table.
            for name_key in ("name", "type"):
                if name_key in section:
                    fields["method"] = section.pop(name_key)
            fields.update(section)
        elif section is not None:
            fields["method"] = section
        for key in ("hyperparameters",):
            if isinstance(data.get(key), dict):
                fields.update(data.pop(key))
        fields.update(data)
        from veri_tui.plan.dataset_locations import rebase

        for key in ("dataset", "eval_dataset"):  # each source's path beside the file
            if key in fields:
                fields[key] = rebase(fields[key], path.parent)
        for key in ("model", "output"):
            value = fields.get(key)
            if not isinstance(value, str) or not value or Path(value).is_absolute():
                continue
            candidate = path.parent / value
            # A model may be a Hub id (org/name): only a path that exists or starts with "."
            # is taken as a folder beside the file.
            if key != "model" or value.startswith(".") or candidate.exists():
                fields[key] = str(candidate.resolve())
    options = {
        "model": model,
        "method": method,
        "gpu": gpu,
        "gpu_count": gpu_count,
        "dataset": dataset,
        "output": output,
    }
    fields.update({k: v for k, v in options.items() if v is not None})
    overrides, set_errors = parse_sets(sets)
    errors.extend(set_errors)
    for alias, name in ALIASES.items():  # a --set of either spelling replaces the file's
        if alias in overrides:
            fields.pop(name, None)
        if name in overrides:
            fields.pop(alias, None)
    fields.update(overrides)
    job, parse_errors = _parse(fields)
    errors += parse_errors
    if errors or job is None:
        # A malformed `--set KEY` (no "=") leaves KEY's value unknown: its rules wait too.
        unknown = [s.strip() for s in sets if "=" not in s and s.strip() not in overrides]
        raise VeriError(errors + _rules_on_the_rest(fields, errors, unknown))
    return job
