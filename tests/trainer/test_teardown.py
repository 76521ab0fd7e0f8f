"""A failed rank aborts its process group instead of destroying it; a clean one destroys it.

`destroy_process_group` can block on a failed NCCL rank (pytorch #141510). gloo never blocks
there, so the slow case makes it block (a `sitecustomize` in the ranks' PYTHONPATH replaces
it with a sleep, the one thing mocked): with an injected CUDA OOM on rank 1 the job must
still end promptly as CUDA_OOM on rank 1, not RANK_HUNG after the watchdog's timeout (what
the old `finally: destroy_process_group()` gave). Also the allocator config CUDA jobs get.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist

import veri_tui.trainer.__main__ as entry
import veri_tui.trainer.loop
from veri_tui.jobfolder.supervise.torchrun_cmd import alloc_conf, rank_environment

REPO = Path(__file__).resolve().parents[2]
SPEC = {"method": "sft_text", "model": "m", "dataset": "d.jsonl"}
HANG = """\
import os
if os.environ.get("RANK") is not None and os.environ.get("VERI_TEST_BLOCK_DESTROY") == "1":
    import time
    import torch.distributed as dist
    dist.destroy_process_group = lambda *a, **k: time.sleep(3600)
"""


@pytest.fixture
def group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A real one-rank gloo group; destroy_process_group only records that it was called."""
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    calls: list[str] = []
    real = dist.destroy_process_group
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: calls.append("destroy"))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_ERROR_FILE"):
        monkeypatch.delenv(key, raising=False)
    yield calls
    if dist.is_initialized():
        real()


def _job(tmp_path: Path) -> str:
    job = tmp_path / "job" / "job.json"
    job.parent.mkdir()
    job.write_text(json.dumps({"spec": SPEC}))
    return str(job)


def test_a_failed_rank_aborts_and_never_destroys(
    tmp_path: Path, group: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_: object) -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(veri_tui.trainer.loop, "train", fail)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        entry.main(["--job", _job(tmp_path)])
    assert group == []  # no destroy on failure ...
    assert not dist.is_initialized()  # ... the group was aborted instead
    record = json.loads((tmp_path / "job" / "failures" / "rank-0.json").read_text())
    assert record["type"] == "RuntimeError"


def test_a_clean_run_destroys_its_group(
    tmp_path: Path, group: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(veri_tui.trainer.loop, "train", lambda *_: None)
    assert entry.main(["--job", _job(tmp_path)]) == 0
    assert group == ["destroy"]


def test_ranks_get_expandable_segments_unless_the_user_chose() -> None:
    env: dict[str, str] = {}
    alloc_conf(env)
    assert env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    for key in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        mine = {key: "max_split_size_mb:128"}
        alloc_conf(mine)
        assert mine == {key: "max_split_size_mb:128"}
    # The supervisor puts it in torchrun's environment, which every rank inherits.
    assert rank_environment({})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert "PYTORCH_CUDA_ALLOC_CONF" not in rank_environment({"PYTORCH_ALLOC_CONF": "x:1"})


# Records the allocator setting in the environment at the moment torch is first imported.
FIRST_TORCH_IMPORT = """
import os, sys
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and not seen:
            seen.append(os.environ.get("PYTORCH_CUDA_ALLOC_CONF"))
        return None
sys.meta_path.insert(0, Watch())
import veri_tui.trainer.__main__
print(seen)
"""


def test_the_rank_sets_the_allocator_before_it_imports_torch() -> None:
    """A rank started without the supervisor's environment (plain torchrun) still has the
    setting in place before torch is imported (it used to be set once torch was in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTORCH_")}
    env["PYTHONPATH"] = str(REPO)
    out = subprocess.run([sys.executable, "-c", FIRST_TORCH_IMPORT], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    assert out.stdout.split() == ["['expandable_segments:True']"]


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_an_oom_rank_whose_destroy_would_block_still_ends_the_job(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HANG)
    env = {
        **os.environ, "VERI_HOME": str(tmp_path / "home"), "VERI_FAULT": "oom:1:2",
        "VERI_TEST_BLOCK_DESTROY": "1", "PYTHONPATH": f"{site}{os.pathsep}{REPO}",
    }  # fmt: skip
    cmd = [sys.executable, "-m", "veri_tui", "launch", "--gpu-count", "2", "--set",
           "max_steps=4", "--set", "hang_timeout_s=20", "--wait"]  # fmt: skip
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=140, env=env, check=False)
    assert out.returncode == 1, out.stderr
    job_id = out.stdout.splitlines()[0]
    rec = json.loads((tmp_path / "home" / "jobs" / job_id / "job.json").read_text())
    err = rec["error"]
    assert (err["code"], err["attribution"], err["rank"]) == ("CUDA_OOM", "customer", 1), err


def test_a_clean_rank_leaves_with_its_output_flushed_and_no_teardown(tmp_path: Path) -> None:
    """`leave(0)`: the exit status given, stdout, stderr and logging flushed, and none of the
    interpreter's teardown (an atexit hook stands for it: gloo ranks have aborted there)."""
    log = tmp_path / "rank.log"
    code = (
        "import atexit, logging, sys\n"
        "from veri_tui.trainer.__main__ import leave\n"
        f"logging.basicConfig(filename={str(log)!r}, level=logging.INFO)\n"
        "logging.info('logged')\n"
        "atexit.register(lambda: print('teardown ran'))\n"
        "sys.stdout.write('no newline'); sys.stderr.write('err no newline')\n"
        "leave(0)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    assert (out.returncode, out.stdout, out.stderr) == (0, "no newline", "err no newline")
    assert "logged" in log.read_text()
