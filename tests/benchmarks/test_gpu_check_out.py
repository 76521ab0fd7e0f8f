"""What the GPU check gives back from its one chance, without running a job: the exit code's
verdict (a run that cannot be judged is not a failure), the plan chosen by the GPU's name,
$OUT within what a lent GPU machine returns (at most 8 files, 2 folders down, 16 MiB each,
plain names), the QLoRA wheel as it travels, and a prepared folder that travels with the
tree (untracked and not ignored) and is never committed."""

from __future__ import annotations

import random
import subprocess
import tarfile
import zipfile
from pathlib import Path

import gpu_check_device
import gpu_check_out
import gpu_check_report
import gpu_check_wheels

REPO = Path(gpu_check_out.__file__).resolve().parents[1]
GPUS = ["H100-80GB", "H200-141GB"]


def test_exit_zero_when_every_run_that_could_be_judged_passed() -> None:
    rows = [
        {"name": "a", "status": "succeeded"},
        {"name": "qlora", "status": "not judged: bitsandbytes does not import here (...)"},
    ]
    verdict = gpu_check_report.judge(rows)
    assert (verdict["passed"], verdict["not_judged"], verdict["exit_code"]) == (["a"], ["qlora"], 0)
    assert verdict["line"] == "gpu_check: 1 passed, 1 not judged (qlora), 0 failed: exit 0"
    # A failure, a timeout and a run the budget left out each fail the check.
    for status in ("failed", "timeout", "not run: not enough of the time budget left"):
        bad = gpu_check_report.judge([*rows, {"name": "b", "status": status}])
        assert (bad["failed"], bad["exit_code"]) == (["b"], 1)
    assert gpu_check_report.judge(rows[1:])["exit_code"] == 1  # nothing judged: no pass


def test_the_plan_is_the_gpu_cuda_names() -> None:
    h100 = {"name": "NVIDIA H100 80GB HBM3", "memory_bytes": 81559 << 20, "torch": "2.11.0"}
    assert gpu_check_device.choose(h100, GPUS)[0] == "H100-80GB"
    h200 = {"name": "NVIDIA H200", "memory_bytes": 143771 << 20}
    gpu, why = gpu_check_device.choose(h200, GPUS)
    assert gpu == "H200-141GB" and why == "NVIDIA H200 (140 GiB): H200-141GB's plan"
    a100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_bytes": 80 << 30}
    gpu, why = gpu_check_device.choose(a100, GPUS)
    assert gpu == "H100-80GB" and "no prepared plan is for 'NVIDIA A100-SXM4-80GB'" in why
    assert gpu_check_device.choose({"name": "cpu"}, ["L4-24GB"])[0] == "L4-24GB"


def _files(out: Path, names: list[str]) -> None:
    for name in names:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("x")


def test_out_layout_rules(tmp_path: Path) -> None:
    ok = tmp_path / "ok"
    _files(ok, ["gpu_check.json", "gpu_check.md", "a/b/deep-enough.txt"])
    assert gpu_check_out.problems(ok) == []
    bad = tmp_path / "bad"
    _files(bad, [f"runs/r{i}/log.txt" for i in range(8)] + ["a/b/c/too-deep.txt", "sp ace"])
    found = gpu_check_out.problems(bad)
    assert any(p.startswith("10 files, over 8") for p in found)
    assert "a/b/c/too-deep.txt: more than 2 folders down" in found
    assert any(p.startswith("sp ace: a name other than") for p in found)


def test_every_runs_logs_go_into_one_archive_under_the_cap(tmp_path: Path, monkeypatch) -> None:
    """Eight runs' records (what the old check copied into $OUT/runs/: about 45 files) are one
    archive beside the results; logs too big for the cap keep their tails."""
    staging, out = tmp_path / "back", tmp_path / "out"
    out.mkdir()
    for i in range(8):
        for rel in ("log.txt", "torchrun.log", "job.json", "failures/rank-0.json",
                    "attempts/1/failures/rank-0.json", "measured/run-rank-0.json"):  # fmt: skip
            (staging / f"runs/r{i}" / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / f"runs/r{i}" / rel).write_bytes(random.Random(f"{i}{rel}").randbytes(20_000))
    monkeypatch.setattr(gpu_check_out, "ARCHIVE_CAP", 150_000)  # random bytes: incompressible
    cap = gpu_check_out.pack(staging, out)
    assert cap < 20_000  # cut until the 48 files fit
    _files(out, ["gpu_check.json", "gpu_check.md", "gpu_check.log"])
    assert gpu_check_out.problems(out) == []
    with tarfile.open(out / gpu_check_out.ARCHIVE) as tar:
        names = tar.getnames()
        log = tar.extractfile("runs/r3/log.txt")
        assert log is not None and log.read().startswith(b"[... ")
    assert len(names) == 48 and "runs/r7/attempts/1/failures/rank-0.json" in names
    assert (out / gpu_check_out.ARCHIVE).stat().st_size <= 150_000


def test_the_wheel_travels_without_other_cudas_libraries(tmp_path: Path) -> None:
    wheel = tmp_path / "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in ("__init__.py", "libbitsandbytes_cpu.so", "libbitsandbytes_cuda126.so",
                     "libbitsandbytes_cuda130.so", "libbitsandbytes_rocm64.so"):  # fmt: skip
            zf.writestr(f"bitsandbytes/{name}", "x")
        zf.writestr("bitsandbytes-0.50.2.dist-info/METADATA", "Name: bitsandbytes")
    kept = gpu_check_wheels.slim(wheel, tmp_path / "wheels")
    with zipfile.ZipFile(kept) as zf:
        assert sorted(zf.namelist()) == [
            "bitsandbytes-0.50.2.dist-info/METADATA",
            "bitsandbytes/__init__.py",
            "bitsandbytes/libbitsandbytes_cpu.so",
            "bitsandbytes/libbitsandbytes_cuda130.so",
        ]
    # Already fetched: kept, and pip is not asked again.
    assert gpu_check_wheels.fetch(tmp_path) == (wheel, f"{wheel.name} (kept in {tmp_path})")


def test_the_prepared_folder_travels_with_the_tree_and_is_never_committed() -> None:
    """The device tool copies untracked files git does not ignore: the folder must not be
    ignored, nor committed (its wheel is megabytes, its plans drift with the planner)."""
    folder = "benchmarks/gpu-check-prepared/plan.json"
    ignored = subprocess.run(["git", "check-ignore", "-q", folder], cwd=REPO, check=False)
    assert ignored.returncode == 1, "benchmarks/gpu-check-prepared/ is git-ignored"
    tracked = subprocess.run(["git", "ls-files", "benchmarks/gpu-check-prepared"], cwd=REPO,
                             capture_output=True, text=True, check=True)  # fmt: skip
    assert tracked.stdout == "", "the prepared folder is committed: git rm -r --cached it"
