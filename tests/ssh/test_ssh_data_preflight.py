"""Issue 35 over SSH (the test sshd): what would fail inside the run is refused at the
preflight, one line each, with nothing uploaded to the host.

The model sits only on the host; the rows are read here and encoded there, with the host's
own transformers, by the trainer's rules (veri_tui/launch/datacheck.py sends the check's code
and the rows on stdin). Nothing uploaded: the remote veri home, where every job folder and
upload goes, is never made, and no job is entered in this machine's registry.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.datafiles import write_jsonl

from veri_tui.errors import VeriError
from veri_tui.launch import jobs
from veri_tui.plan import load_job_config
from veri_tui.plan.model_sources import bundled_tiny_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150)]

TOKENIZER = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
LONG = "Summarise this: " + "lorem ipsum dolor sit amet " * 10  # 64 < its tokens < 2048


def _refused(job, alias: str) -> list[str]:
    with pytest.raises(VeriError) as err:
        jobs.launch(job, None, host=alias)
    return err.value.lines()


def test_launch_refuses_before_uploading_anything(ssh_env, tmp_path: Path) -> None:
    remote_home = tmp_path / "remote-veri"
    host_model = tmp_path / "on-the-host" / "model"
    shutil.copytree(bundled_tiny_model(), host_model)
    rows = [{"prompt": LONG if i in (6, 17) else f"{i} + {i}?", "completion": f" {2 * i}"}
            for i in range(50)]  # fmt: skip
    data = write_jsonl(tmp_path / "qa.jsonl", rows)
    alias = ssh_env.alias

    # Prompts that fill max_seq_length: counted with the model's tokenizer on the host.
    job = load_job_config(None, model=str(host_model), dataset=str(data),
                          sets=["max_seq_length=64"])  # fmt: skip
    assert _refused(job, alias) == [
        f"error: dataset: 2 of 50 rows have no tokens to train on within max_seq_length=64 "
        f"(the prompt fills it): {data} lines 7, 18; raise max_seq_length "
        "(--set max_seq_length=N), or shorten or drop those rows"
    ]
    # A global batch larger than the rows the trainer would have.
    job = load_job_config(None, model=str(host_model), dataset=str(data),
                          sets=["micro_batch_size=999"])  # fmt: skip
    [line] = _refused(job, alias)
    assert line.startswith("error: global_batch_size: 999 (micro_batch_size 999 x ")
    assert line.endswith(
        "is more than the dataset's 50 rows; lower micro_batch_size or "
        "gradient_accumulation_steps, or set global_batch_size to at most 50"
    )
    # A checkpoint saved with model.save_pretrained alone: no tokenizer files there.
    for name in TOKENIZER:
        (host_model / name).unlink()
    job = load_job_config(None, model=str(host_model), dataset=str(data))
    [line] = _refused(job, alias)
    assert line.startswith(f"error: model: {host_model} has no tokenizer files (")
    assert "AutoTokenizer.from_pretrained(BASE_MODEL).save_pretrained(" in line
    # `plan --host` refuses it too (exit 2 in the CLI).
    with pytest.raises(VeriError, match="has no tokenizer files"):
        jobs.plan_on(job, alias)

    assert not remote_home.exists()  # no job folder, no upload: every refusal came first
    assert jobs.list_jobs() == []
