"""benchmarks/gpu_check*, without running a job: the time budget, the MFU (the planner's
FLOPs), the prepared records and expected figures, the summary beside the planner's terms,
the features covered, and what is copied back for the GPU machine. The CPU mode end to end
is test_gpu_check_cpu.py."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import gpu_check
import gpu_check_features
import gpu_check_files
import gpu_check_prepare
import gpu_check_report
import pytest
from support.synthetic import write_checkpoint

from veri_tui.plan import peak, read_model_info
from veri_tui.plan.throughput import flops_per_token

SCRIPT = Path(gpu_check.__file__)


def test_run_timeout_keeps_a_floor_for_later_runs_and_caps_each() -> None:
    assert gpu_check.run_timeout(400, runs_left=8, floor_s=30, cap_s=150) == 150
    # 100 s left for 3 runs: this one may take 100 - 2 x 30 = 40 s.
    assert gpu_check.run_timeout(100, runs_left=3, floor_s=30, cap_s=150) == 40
    # The last run gets all that is left, up to the cap.
    assert gpu_check.run_timeout(70, runs_left=1, floor_s=30, cap_s=150) == 70
    # Not even the floor left once the later runs are served: skip this one.
    assert gpu_check.run_timeout(80, runs_left=3, floor_s=30, cap_s=150) is None
    assert gpu_check.run_timeout(-5, runs_left=1, floor_s=30, cap_s=150) is None


def test_timeouts_never_add_up_past_the_budget() -> None:
    """Every run taking its whole timeout still ends inside the budget."""
    for budget in (60, 200, 430):
        left, spent = budget, 0.0
        for i in range(8):
            t = gpu_check.run_timeout(left, 8 - i, floor_s=30, cap_s=150)
            if t is None:
                continue
            spent += t
            left -= t
        assert spent <= budget


def test_mfu_uses_the_planners_flops_with_heads_times_head_dim(tmp_path: Path) -> None:
    """Qwen3-0.6B: 16 heads x 128 = 2048 != hidden 1024, so attention FLOPs double against
    the old 12 L h s formula, which was 14% low overall."""
    write_checkpoint(tmp_path / "m", gpu_check_prepare.SHAPES["qwen3-0.6b"])
    info = read_model_info(str(tmp_path / "m"))
    flops = gpu_check_prepare.model_flops_per_token(info, 2048)
    assert flops == flops_per_token(info, 2048, lora=False, gc=False, dpo=False)["total"]
    n = info.parameter_count  # tied: the head multiplies with the embedding's weights
    assert flops == 6 * n + 12 * 28 * (16 * 128) * 2048
    old = 6 * n + 12 * 28 * 1024 * 2048
    assert 0.13 < 1 - old / flops < 0.15
    # Recompute under checkpointing is hardware work, never counted in MFU.
    hw = flops_per_token(info, 2048, lora=False, gc=True, dpo=False)["total"]
    assert hw > flops
    assert gpu_check_report.mfu(10_000, flops, 989.0) == pytest.approx(10_000 * flops / 989e12)


def test_prepare_writes_launcher_records_and_expected_figures(tmp_path: Path) -> None:
    index = gpu_check_prepare.prepare(
        tmp_path, shapes=["qwen3-0.6b", "qwen3-1.7b"], mbs_list=[1, 4], gc_list=[True, False],
        seq=2048, steps=12, gpus=["H100-80GB", "H200-141GB"], gpu_count=1, device="cuda",
    )  # fmt: skip
    assert json.loads((tmp_path / "plan.json").read_text()) == index
    # One plan per GPU a device machine may be: the same runs, each GPU's own figures (the
    # H200's faster memory: its tokens/s are higher).
    h100, h200 = (index["plans"][g]["runs"] for g in ("H100-80GB", "H200-141GB"))
    assert [r["name"] for r in h100] == [r["name"] for r in h200]
    pairs = zip(h100, h200, strict=True)
    assert all(a["tokens_per_s_per_gpu"] < b["tokens_per_s_per_gpu"] for a, b in pairs)
    spec = json.loads((tmp_path / "runs/H100-80GB/qwen3-0.6b-mbs1-gc/job.json").read_text())
    assert spec["spec"]["gpu"] == "H100-80GB"
    runs = h200
    assert len(runs) == 8
    assert {r["parameter_count"] for r in runs} == {596_049_920, 1_720_574_976}
    for r in runs:
        job = json.loads((tmp_path / "runs/H200-141GB" / r["name"] / "job.json").read_text())
        spec = job["spec"]
        assert spec["model_path"] == f"@WORK@/models/{r['shape']}"
        assert spec["resolved_parallelism"]["micro_batch_size"] == r["micro_batch_size"]
        assert spec["resolved_parallelism"]["gradient_checkpointing"] == r["gradient_checkpointing"]
        assert spec["plan_header"][-1].startswith("plan: dp=1 zero_stage=0")
        # The planner's own peak terms (veri_tui/plan/peak.py), not a re-derivation.
        parts = r["peak_parts"]
        assert r["peak_bytes"] == sum(parts.values()) - parts["overhead"]
        assert r["device_peak_bytes"] == r["peak_bytes"] + parts["overhead"] == sum(parts.values())
        assert parts["states"] == r["states_bytes"]
        assert r["peak_tflops"] == 989.0 and 0 < r["mfu"] < 1
    by = {r["name"]: r for r in runs}
    # 1.7B at mbs 1: the peak is the larger moment. torch's foreach AdamW made a temporary of
    # 2 bytes x N (3.4 GB), over the activations (17.21 GB); the bf16 AdamW of
    # veri_tui/trainer/adamw.py is one compiled kernel a tensor at this size (no temporary; an
    # eager batch would hold 0.12 GB), so states + activations (15.55 GB) is it.
    small = by["qwen3-1.7b-mbs1-gc"]
    step = peak.SR_STEP_TEMP_BYTES * peak.SR_CHUNK
    assert small["states_bytes"] + small["activation_bytes"] == pytest.approx(15.55e9, rel=2e-3)
    assert small["peak_bytes"] == pytest.approx(15.55e9, rel=2e-3)
    assert small["peak_bytes"] > small["states_bytes"] + step
    # Checkpointing costs time and saves memory; a larger micro-batch costs memory.
    assert (
        by["qwen3-0.6b-mbs4-gc"]["tokens_per_s_per_gpu"]
        < by["qwen3-0.6b-mbs4-nogc"]["tokens_per_s_per_gpu"]
    )
    assert by["qwen3-1.7b-mbs4-gc"]["peak_bytes"] < by["qwen3-1.7b-mbs4-nogc"]["peak_bytes"]
    assert by["qwen3-1.7b-mbs1-gc"]["peak_bytes"] < by["qwen3-1.7b-mbs4-gc"]["peak_bytes"]
    filled = gpu_check.fill_paths(
        json.loads((tmp_path / "runs/H200-141GB/qwen3-0.6b-mbs1-gc/job.json").read_text()),
        Path("/w"),
    )
    assert filled["spec"]["dataset"] == "/w/text-2048.jsonl"


def test_summary_sets_each_memory_figure_beside_the_planners_term() -> None:
    expected = {
        "name": "x", "shape": "tiny", "parameter_count": 10**6, "micro_batch_size": 1,
        "gradient_checkpointing": True, "gpu_count": 2, "peak_bytes": 1000,
        "peak_parts": {"overhead": 2000},
        "device_peak_bytes": 3000, "tokens_per_s_per_gpu": 100.0,
        "model_flops_per_token": 10**9, "peak_tflops": 100.0, "mfu": 0.001,
    }  # fmt: skip
    metrics = [{"tokens_per_s": t, "peak_mem_bytes": p, "loss": 1.0} for t, p in
               [(1, 900), (2, 1500), (3, 1100), (200, 1200), (240, 1200), (400, 1200)]]  # fmt: skip
    measured = {"device": "cuda", "peak_bytes": 1500, "peak_reserved_bytes": 1800,
                "device_memory_bytes": 3300, "alloc_retries": 0,
                "device_memory_source": "nvml (this process)"}  # fmt: skip
    raw = {"status": "succeeded", "metrics": metrics, "job_measured": measured}
    row = gpu_check_report.summarize(expected, raw)
    assert row["measured_tokens_per_s_per_gpu"] == 120.0  # median(200, 240, 400) / 2 GPUs
    # allocated and reserved against the planner's allocated bytes (optimizer step included),
    # the driver's figure against allocated + the 2 GiB overhead.
    assert (row["measured_peak_bytes"], row["peak_ratio"]) == (1500, 1.5)
    assert (row["measured_reserved_bytes"], row["reserved_ratio"]) == (1800, 1.8)
    assert (row["measured_device_bytes"], row["device_ratio"]) == (3300, 1.1)
    # The device beyond the allocator's reserve against the plan's overhead term.
    assert (row["measured_overhead_bytes"], row["overhead_ratio"]) == (1500, 0.75)
    assert row["tokens_ratio"] == pytest.approx(1.2)
    assert row["measured_mfu"] == pytest.approx(120 * 1e9 / 100e12)
    # Without job.json's measurements (CPU; a run that ended early): the metric lines' peak.
    cpu = gpu_check_report.summarize(expected, {"status": "failed", "metrics": metrics})
    assert cpu["measured_peak_bytes"] == 1500 and cpu["measured_device_bytes"] is None
    skipped = gpu_check_report.summarize(expected, None)
    assert skipped["status"].startswith("not run: not enough of the time budget")
    plan = {"gpu": "H200-141GB", "gpu_count": 2, "device": "cuda", "seq": 8, "steps": 6,
            "runs": [expected, {**expected, "name": "y", "covers": ["moe"]}]}  # fmt: skip
    table = gpu_check_report.render(plan, [row])
    assert (
        "| x | 1.0M mbs 1 gc on | succeeded | 0.00 | 0.00 | 1.50 | 0.00 | 1.80 | 0.00 "
        "| 0.00 | 1.10 | 0 | 100 | 120 | 1.20 |"
    ) in table
    assert "| y | moe | not run yet | 0.00 | - | - | - | - | 0.00 | - | - | - | 100 |" in table


def test_preparation_covers_every_feature(tmp_path: Path) -> None:
    wheel = tmp_path / "bitsandbytes-0.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:  # the GPU machine unpacks it with zipfile
        zf.writestr("bitsandbytes/__init__.py", "")
    index = gpu_check_prepare.prepare(
        tmp_path / "prep", shapes=["qwen3-1.7b"], mbs_list=[4], gc_list=[True], seq=2048,
        steps=12, gpus=["H200-141GB"], gpu_count=1, device="cuda",
        features=[f.name for f in gpu_check_features.FEATURES], wheels=[wheel],
    )  # fmt: skip
    summary = index["plans"]["H200-141GB"]
    assert set(summary["coverage"]) == set(gpu_check_features.COVERAGE)
    assert summary["wheels"] == [wheel.name] and (tmp_path / "prep/wheels" / wheel.name).is_file()
    by = {r["name"]: r for r in summary["runs"]}
    assert {r["kind"] for r in summary["runs"]} == {"feature", "performance"}

    def spec(name: str) -> dict:
        path = tmp_path / "prep/runs/H200-141GB" / name / "job.json"
        return json.loads(path.read_text())["spec"]

    # Layouts the planner refuses on one GPU run as written, with the planner's terms at dp=1.
    for name, stage, offload in (("stage3-1rank", 3, False), ("cpu-offload", 3, True)):
        rp = spec(name)["resolved_parallelism"]
        assert (rp["zero_stage"], rp["cpu_offload"], rp["data_parallel_size"]) == (
            stage, offload, 1)  # fmt: skip
        assert by[name]["zero_stage"] == stage and by[name]["cpu_offload"] is offload
    stage3, offload = by["stage3-1rank"], by["cpu-offload"]
    assert stage3["peak_parts"]["in_flight"] > 0  # the root unit and two layers gathered
    assert offload["peak_parts"]["states"] == 0  # offloaded: the GPU holds what is in flight
    assert offload["peak_bytes"] < stage3["peak_bytes"]
    dpo = spec("lora-dpo-selective-resume")
    hp = dpo["hyperparameters"]
    assert dpo["method"] == "dpo" and hp["lora_rank"] == 16 and hp["checkpoint_steps"] == 3
    assert dpo["resolved_parallelism"]["activation_checkpointing"] == "selective"
    assert by["lora-dpo-selective-resume"]["fault"] == "raise:0:5"  # fails after step-3
    assert by["lora-dpo-selective-resume"]["data"] == {"kind": "dpo", "seq": 1024}
    assert spec("fp32-nogc")["resolved_parallelism"]["precision"] == "fp32"
    assert json.loads((tmp_path / "prep/models/qwen3-moe/config.json").read_text())[
        "num_experts"] == 16  # fmt: skip
    # Planned with its experts and router (what from_config builds on meta: 457,797,632),
    # not as a dense model of the same widths (344,351,744: the header once written so).
    assert by["moe"]["parameter_count"] == 457_797_632
    assert spec("qlora")["hyperparameters"]["load_in_4bit"] is True
    assert by["qlora"]["needs"] == "bitsandbytes"
    # Every run's expected peak includes the optimizer step where it is the larger moment.
    for r in summary["runs"]:
        parts = r["peak_parts"]
        assert r["peak_bytes"] == sum(parts.values()) - parts["overhead"]
        assert parts["optimizer_step"] == 0 or parts["activations"] == 0


def test_datasets_and_logs_for_the_gpu_machine(tmp_path: Path) -> None:
    runs = [{"data": {"kind": "dpo", "seq": 16}, "micro_batch_size": 1, "gpu_count": 1,
             "steps": 5}, {"data": {"kind": "text", "seq": 16}, "micro_batch_size": 2,
             "gpu_count": 2, "steps": 3}]  # fmt: skip
    gpu_check_files.build_datasets(tmp_path, runs)
    dpo = [json.loads(x) for x in (tmp_path / "dpo-16.jsonl").read_text().splitlines()]
    assert len(dpo) == 6 and set(dpo[0]) == {"prompt", "chosen", "rejected"}
    assert len((tmp_path / "text-16.jsonl").read_text().splitlines()) == 16
    job = tmp_path / "job"
    (job / "failures").mkdir(parents=True)
    (job / "failures" / "rank-1.json").write_text("{}")
    (job / "torchrun.log").write_bytes(b"x" * (gpu_check_files.LOG_CAP + 10))
    copied = gpu_check_files.bring_back(job, tmp_path / "back", "r")
    assert sorted(copied) == ["runs/r/failures/rank-1.json", "runs/r/torchrun.log"]
    kept = (tmp_path / "back/runs/r/torchrun.log").read_bytes()
    assert kept.startswith(b"[... 10 bytes cut ...]") and kept.endswith(b"x" * 100)
