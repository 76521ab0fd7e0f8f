"""`veri-tui resume JOB --set KEY=VALUE` re-plans from the keys the user set, not from every
default the spec records: before, `--set max_steps=130` on an sft_text job warned
"max_length applies to dpo" about a key nobody wrote. No torchrun: the re-planned spec only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from veri_tui.launch.replan import resume_spec, set_by_user
from veri_tui.launch.spec import build_record
from veri_tui.plan import job_from_fields, plan_job


def _record(tmp_path: Path, fields: dict[str, object]) -> dict:
    job = job_from_fields(fields)
    return build_record(job, plan_job(job), "20261206-030000-abcd", tmp_path / "job")


def _replan(record: dict, sets: list[str]) -> dict:
    new = resume_spec(record, None, sets, lambda job: (job, plan_job(job)))
    assert new is not None
    return new


@pytest.mark.parametrize("method", ["sft_text", "dpo"])
def test_a_set_key_brings_no_warning_about_keys_never_set(home, tmp_path, method) -> None:
    record = _record(tmp_path, {"method": method})
    assert not [w for w in record["spec"]["plan_header"] if w.startswith("warning:")]
    new = _replan(record, ["max_steps=130"])
    assert [w for w in new["plan_header"] if w.startswith("warning:")] == []
    # The same run otherwise: every hyperparameter as it was, max_steps as set, and the
    # plan's global batch kept (pinned by the re-plan, as before).
    old = dict(record["spec"]["hyperparameters"], max_steps=130)
    assert new["hyperparameters"] == {**old, "global_batch_size": 1}


def test_a_key_the_user_set_still_warns(home, tmp_path) -> None:
    """A value other than the default was set by someone: its warning stays."""
    record = _record(tmp_path, {"method": "sft_text", "max_length": 512})
    new = _replan(record, ["max_steps=130"])
    assert (
        "warning: max_length applies to dpo; sft_text truncates at max_seq_length"
        in (new["plan_header"])
    )


def test_only_values_other_than_the_defaults_count_as_set() -> None:
    assert set_by_user({"max_length": 1024, "lora_rank": 16, "learning_rate": 1e-4}) == {
        "lora_rank": 16
    }
