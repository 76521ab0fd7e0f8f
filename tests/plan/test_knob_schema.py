"""The knob schema (veri_tui/jobfolder/knobs) as the planner reads it: one field list, pydantic's
messages, `--set` texts that are a knob's own values, and the `plan --help` knob list."""

from __future__ import annotations

import math
import typing

import pytest
from pydantic import Field, TypeAdapter, ValidationError

from veri_tui.cli import main
from veri_tui.jobfolder import knobs as schema
from veri_tui.jobfolder.knobs import PIN_KEYS, table
from veri_tui.plan import Hyperparameters, JobConfig, load_job_config, plan_job
from veri_tui.plan.config import parse_value
from veri_tui.plan.knobcheck import KnobValueError, check, plain

# Values a veri.toml, a `--set` or a form field can carry, and a few that none should.
VALUES = [True, False, 0, 1, 2, -1, 3, 8, 65536, 2.0, 2.5, 1e-4, float("inf"), float("nan"),
          "3", " 3 ", "3.0", "x", "", "auto", "none", "full", "selective", "bf16", "fp16",
          "ethernet", "on", "off", "yes", [], ["a", "b"], ["a", 1], {"a": 1}]  # fmt: skip
KNOBS = table(schema.Job) + table(schema.Hyperparameters)


def _pydantic(knob: schema.Knob, value: object) -> tuple[str, object]:
    """("ok", value) or ("error", its refusal in plain words) from a TypeAdapter of the
    knob's type and bounds."""
    bounds: dict[str, object] = {
        b: getattr(knob, b) for b in ("ge", "gt", "le", "lt") if getattr(knob, b) is not None
    }
    if knob.finite:
        bounds["allow_inf_nan"] = False
    adapter = TypeAdapter(typing.Annotated[knob.type, Field(**bounds)])
    try:
        return "ok", adapter.validate_python(value)
    except ValidationError as exc:
        return "error", plain(exc.errors())


@pytest.mark.parametrize("knob", KNOBS, ids=lambda k: k.name)
def test_every_value_is_checked_as_pydantic_checks_it(knob: schema.Knob) -> None:
    for value in VALUES:
        want = _pydantic(knob, value)
        try:
            got: tuple[str, object] = ("ok", check(knob, value))
        except KnobValueError as exc:
            got = ("error", exc.msg)
        if knob.error and want[0] == "error" or (knob.error and isinstance(value, bool)):
            want = ("error", knob.error)  # zero_stage: one message, and no bools
        same = got == want or (got[0] == "ok" and isinstance(got[1], float) and math.isnan(got[1]))
        assert same and type(got[1]) is type(want[1]), (value, got, want)
        # Every refusal in plain words: none of pydantic's "Input should be ..." reaches a user.
        assert got[0] == "ok" or "Input should" not in str(got[1]), (value, got)


def test_one_field_list_for_planner_trainer_and_records() -> None:
    assert list(Hyperparameters.knob_table) == [k.name for k in table(schema.Hyperparameters)]
    assert list(JobConfig.knob_table) == [k.name for k in table(schema.Job)]
    assert PIN_KEYS == tuple(k.name for k in table(schema.Hyperparameters) if k.pin)
    assert schema.CHECKPOINTING == typing.get_args(schema.fields.Checkpointing)


def test_set_text_that_is_a_knob_value_stays_text() -> None:
    assert parse_value("none", "activation_checkpointing") == "none"
    assert parse_value("none", "lora_alpha") is None  # "not set": the default applies
    assert parse_value("none") is None


def test_set_activation_checkpointing_none_turns_checkpointing_off() -> None:
    # main read `none` as null here, and the plan fell back to full checkpointing.
    job = load_job_config(sets=["activation_checkpointing=none"])
    assert job.hyperparameters.checkpointing == "none"
    record = plan_job(job)
    assert record.resolved_parallelism["activation_checkpointing"] == "none"
    assert "gradient_checkpointing=off" in record.plan_line


def test_alias_is_the_schema_s() -> None:
    job = load_job_config(sets=["batch_size=3"])
    assert job.hyperparameters.micro_batch_size == 3
    assert job.hyperparameters.fields_given == {"micro_batch_size"}


def test_plan_help_lists_every_knob(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    text = capsys.readouterr().out
    listed = text[text.index("knobs (--set") :]
    for k in table(schema.Hyperparameters):
        assert f"\n  {k.name} = " in listed, k.name
    assert "activation_checkpointing = none|selective|full; default unset" in listed
    assert "micro_batch_size = integer >= 1; default 1, alias batch_size" in listed


def test_the_unknown_key_hint_leads_to_a_list_of_the_knobs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 27: the hint sent users to `plan --help`, which listed no knobs, and
    `eval_steps` was taken for a misspelt max_steps. Now eval_steps is a knob, a near miss
    names it, and a far one's hint leads to a help that lists every knob."""
    assert main(["plan", "--set", "eval_steps=5", "--json"]) == 0
    capsys.readouterr()
    assert main(["plan", "--set", "eval_step=5"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: eval_step: unknown key; did you mean 'eval_steps'?"
    ]
    assert main(["plan", "--set", "zzz=5"]) == 2
    hint = capsys.readouterr().err.strip()
    assert hint == (
        "error: zzz: unknown key; see `veri-tui plan --help` and docs/planning.md for the "
        "known keys"
    )
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    listed = capsys.readouterr().out
    assert "\n  eval_steps = integer >= 1 (steps); default unset" in listed
