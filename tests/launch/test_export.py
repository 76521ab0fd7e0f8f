"""`veri-tui export` on real jobs: a tiny LoRA job and a tiny full fine-tune, each launched
for real (2 CPU ranks under torchrun, side by side, one module fixture). The LoRA merged
by export loads in transformers with the logits of base + adapter (peft) within bf16
tolerance and generates; the adapter export loads through peft; the model card holds the
plan, the data's hash and the cost; a full fine-tune's --merge is one no-op line. Bad job
ids and pushes that cannot happen (offline, no token) are one line, exit 2, nothing
written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from launch_helpers import cli

from veri_tui.bundled import assets_dir
from veri_tui.cli import main
from veri_tui.jobfolder.contract import manifest
from veri_tui.jobfolder.data.source import Source, fingerprint

pytestmark = pytest.mark.timeout(900)  # two launches side by side, then the exports
TINY = assets_dir() / "tiny-model"
DATA = assets_dir() / "data" / "sft_messages.jsonl"
KNOBS = ["max_steps=6", "learning_rate=3e-2", "eval_fraction=0.1"]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """{"lora": job folder, "full": job folder}, both succeeded; VERI_HOME set meanwhile."""
    home = tmp_path_factory.mktemp("export") / "veri-home"
    env = dict(os.environ, VERI_HOME=str(home))
    args = ["launch", "--model", str(TINY), "--dataset", str(DATA), "--gpu-count", "2",
            "--wait", *(f"--set={k}" for k in KNOBS)]  # fmt: skip
    procs = {
        name: subprocess.Popen([sys.executable, "-m", "veri_tui", *args, *extra], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, extra in {"lora": ["--set=lora_rank=8"], "full": []}.items()
    }  # fmt: skip
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=400)
        assert proc.returncode == 0, f"{name}: {out[-2000:]}{err[-2000:]}"
    folders = {}
    for job_dir in (home / "jobs").iterdir():
        spec = json.loads((job_dir / "job.json").read_text())["spec"]
        folders["lora" if spec["hyperparameters"].get("lora_rank") else "full"] = job_dir
    before = os.environ.get("VERI_HOME")
    os.environ["VERI_HOME"] = str(home)
    try:
        yield folders
    finally:
        if before is None:
            os.environ.pop("VERI_HOME")
        else:
            os.environ["VERI_HOME"] = before


@pytest.fixture(scope="module")
def merged(jobs: dict[str, Path]) -> Path:
    proc = cli("export", jobs["lora"].name, "--merge", env=os.environ.copy(), timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"export: merged checkpoint in {jobs['lora'] / 'export'}" in proc.stdout
    # Where it writes: the export folder; the base is only read.
    base = json.loads((jobs["lora"] / "job.json").read_text())["spec"]["model_path"]
    assert proc.stdout.startswith(
        f"export: merging the LoRA adapter with its base {base} (read, not changed) into "
        f"{jobs['lora'] / 'export'}, one tensor at a time\n"
    )
    return jobs["lora"] / "export"


def _ids() -> torch.Tensor:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(TINY)
    return tok("Where does the owl live? It lives", return_tensors="pt")["input_ids"]


@pytest.mark.slow
def test_the_merged_checkpoint_has_the_logits_of_base_plus_adapter(
    jobs: dict[str, Path], merged: Path
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = _ids()
    with torch.no_grad():
        base = AutoModelForCausalLM.from_pretrained(TINY).eval()
        plain = base(ids).logits
        tuned = PeftModel.from_pretrained(base, jobs["lora"] / "output").eval()(ids).logits
        model = AutoModelForCausalLM.from_pretrained(merged).eval()
        logits = model(ids).logits
        out = model.generate(ids, max_new_tokens=5, do_sample=False, pad_token_id=0)
    torch.testing.assert_close(logits, tuned, rtol=1.6e-2, atol=1e-2)  # bf16's tolerance
    assert (logits - plain).abs().max() > 0.05  # the adapter is in: not the base's logits
    assert out.shape[1] == ids.shape[1] + 5
    assert manifest.problems(merged) == []
    assert not (merged / "adapter_config.json").exists()
    assert not list(merged.parent.glob(".export.tmp*"))


@pytest.mark.slow
def test_the_model_card_has_the_plan_the_data_hash_and_the_cost(
    jobs: dict[str, Path], merged: Path
) -> None:
    card = (merged / "README.md").read_text()
    rec = json.loads((jobs["lora"] / "job.json").read_text())
    assert card.startswith("---\nlibrary_name: transformers\n")
    assert rec["spec"]["plan_header"][-1] in card
    assert "| lora_rank | 8 |" in card and "| learning_rate | 0.03 |" in card
    assert f"sha256 of the data (the token cache's key): {fingerprint([Source(str(DATA))])}" in card
    last = [json.loads(x) for x in (jobs["lora"] / "metrics.jsonl").read_text().splitlines()][-1]
    assert f"- step 6: loss {last['loss']:.4f}, eval_loss {last['eval_loss']:.4f}" in card
    assert "- predicted: " in card and "- measured: " in card and "GPU-hours held" in card
    smoke = json.loads((merged / "smoke.json").read_text())
    assert len(smoke) == 3 and all(s["tuned"] and s["base"] for s in smoke)
    assert smoke[0]["prompt"].endswith("<|im_start|>assistant\n")  # the chat template's
    assert f"- tuned: {smoke[0]['tuned']!r}" in card


@pytest.mark.slow
def test_the_adapter_export_loads_through_peft(
    jobs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from peft import AutoPeftModelForCausalLM

    out = tmp_path / "adapter"
    assert main(["export", jobs["lora"].name, "--output", str(out)]) == 0
    assert "export: adapter checkpoint in" in capsys.readouterr().out
    assert (out / "README.md").read_text().startswith("---\nlibrary_name: peft\n")
    model = AutoPeftModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        assert model(_ids()).logits.shape[-1] == 448


@pytest.mark.slow
def test_a_full_fine_tune_exports_its_checkpoint_and_merge_is_a_no_op(
    jobs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoModelForCausalLM

    out = tmp_path / "full"
    assert main(["export", jobs["full"].name, "--merge", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"export: --merge: job {jobs['full'].name} is a full fine-tune; its artifact is " \
        "the whole model already, nothing to merge" in printed  # fmt: skip
    assert "export: full checkpoint in" in printed
    AutoModelForCausalLM.from_pretrained(out)
    assert manifest.problems(out) == []


def test_a_bad_job_id_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    assert main(["export", "no-such-job", "--merge"]) == 2
    out = capsys.readouterr()
    assert (out.out + out.err).splitlines() == [
        "error: job: no job no-such-job; `veri-tui jobs` lists them"
    ]


@pytest.mark.parametrize(("kind", "label"), [("ssh", "gpu-box"), ("slurm", "slurm:gpu-box")])
def test_a_job_on_an_ssh_host_says_how_to_bring_its_folder_here(
    kind: str,
    label: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # a Slurm job's folder: on its login node's disks (the label is the backend's)
    from veri_tui.launch import registry

    monkeypatch.setenv("VERI_HOME", str(tmp_path))
    job_id, folder = "20261206-010203-abcd", "/home/u/.veri/jobs/20261206-010203-abcd"
    record = {"job_id": job_id, "status": "succeeded", "spec": {}}
    registry.save(registry.RegistryEntry(job_id, "gpu-box", folder, None, "python3", record,
                                         kind=kind))  # fmt: skip
    assert main(["export", job_id, "--merge"]) == 2  # and no connection is tried
    out = capsys.readouterr()
    assert (out.out + out.err).splitlines() == [
        f"error: export: job {job_id} ran on {label}: its artifact is in {folder} there. Copy "
        f"that folder into $VERI_HOME/jobs/ here (e.g. scp -r gpu-box:{folder} ~/.veri/jobs/), "
        f"then run `veri-tui export {job_id}` again"
    ]
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_x"}, "error: push-to-hub: HF_HUB_OFFLINE is set"),
        ({"HF_HUB_OFFLINE": "0"}, "error: push-to-hub: no Hugging Face token; run `hf auth login`"),
    ],
)
def test_a_push_that_cannot_happen_is_one_line_before_any_work(
    tmp_path: Path, env: dict[str, str], line: str
) -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    clean |= {"VERI_HOME": str(tmp_path / "home"), "HF_HOME": str(tmp_path / "hf"), **env}
    proc = cli("export", "any-job", "--merge", "--push-to-hub", "me/tiny", env=clean)
    assert proc.returncode == 2
    assert proc.stdout == "" and len(proc.stderr.splitlines()) == 1
    assert proc.stderr.startswith(line)
    assert not (tmp_path / "home").exists()  # nothing looked up, nothing written
