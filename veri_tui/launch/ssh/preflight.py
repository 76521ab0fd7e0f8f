"""Preflight on the SSH target, before anything is uploaded: is this host able to run the job?

One remote Python run (a fixed script; the only arguments are quoted argv entries) reports
the Python and torch versions, the CUDA GPUs (torch, and nvidia-smi when present), whether the
trainer's libraries are importable, and the free disk under the remote veri home. The model is
found and counted over SFTP (remote_model). Every problem becomes one Refusal line.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass, field
from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.launch import memcheck
from veri_tui.launch.diskcheck import Place, refusals, row
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.remote_model import (
    expand_home,
    is_hub_id,
    locate_model,
    remote_hub_cache,
    remote_model_info,
)

MIN_PYTHON = (3, 11)
Row = tuple[str, bool, str]
#: Kept free on top of what the job writes, so the remote machine does not run out entirely.
DISK_MARGIN_BYTES = 512 * 2**20

# Runs on the remote host with its own python: stdlib only, prints one JSON object.
PROBE_SCRIPT = r"""
import importlib.util, json, os, platform, shutil, subprocess, sys
out = {"python": platform.python_version(), "executable": sys.executable,
       "home": os.path.expanduser("~"), "missing": []}
for mod in ("transformers", "peft", "safetensors"):
    if importlib.util.find_spec(mod) is None:
        out["missing"].append(mod)
try:
    import torch
    out["torch"] = torch.__version__
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out["cuda"] = [{"name": torch.cuda.get_device_name(i),
                    "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
                   for i in range(n)]
except Exception as exc:
    out["torch"] = None
    out["torch_error"] = f"{type(exc).__name__}: {exc}"
    out["cuda"] = []
smi = shutil.which("nvidia-smi")
if smi:
    try:
        r = subprocess.run([smi, "--query-gpu=name,memory.total",
                            "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
        rows = [line.rsplit(",", 1) for line in r.stdout.strip().splitlines()]
        out["nvidia_smi"] = [{"name": n.strip(), "memory_bytes": int(m) * 2**20} for n, m in rows]
    except Exception as exc:
        out["nvidia_smi_error"] = f"{type(exc).__name__}: {exc}"
path = os.path.expanduser(sys.argv[1])
while not os.path.isdir(path):
    path = os.path.dirname(path) or "/"
st = os.statvfs(path)
out["disk_path"] = path
out["disk_free_bytes"] = st.f_bavail * st.f_frsize
try:
    with open("/proc/meminfo") as f:
        kb = [int(l.split()[1]) for l in f if l.startswith("MemAvailable:")]
    if kb:
        out["mem_available_bytes"] = kb[0] * 1024
except (OSError, ValueError, IndexError):
    pass
print(json.dumps(out))
"""


def remote_python() -> str:
    """The interpreter to run remotely: $VERI_REMOTE_PYTHON, else `python3` from PATH."""
    return os.environ.get("VERI_REMOTE_PYTHON") or "python3"


def remote_veri_home() -> str:
    """$VERI_REMOTE_HOME (an absolute or `~/` path on the remote host), else `~/.veri`."""
    return os.environ.get("VERI_REMOTE_HOME") or "~/.veri"


@dataclass
class Preflight:
    """What the target reported, plus every problem found (empty when it can run the job)."""

    host: str
    python: str
    facts: dict[str, Any]
    home: str
    veri_home: str
    gpus: list[dict[str, Any]] = field(default_factory=list)
    model_path: str | None = None
    model_info: Any = None
    model_bytes: int = 0
    problems: list[Refusal] = field(default_factory=list)

    @property
    def gpu_name(self) -> str | None:
        """The plan's GPU for the detected hardware: `custom-<GB>GB` with its real memory.

        Three decimals keep the memory to the megabyte; the smallest board bounds the plan.
        """
        if not self.gpus:
            return None
        smallest = min(g["memory_bytes"] for g in self.gpus)
        return f"custom-{smallest / 1e9:.3f}GB"

    def summary(self) -> list[str]:
        """Human lines for the log and the app: what was found on the host."""
        gpus = ", ".join(f"{g['name']} ({g['memory_bytes'] / 1e9:.1f} GB)" for g in self.gpus)
        lines = [
            f"host {self.host}: python {self.facts.get('python')} ({self.python}), "
            f"torch {self.facts.get('torch') or 'missing'}",
            f"gpus: {len(self.gpus)} CUDA" + (f": {gpus}" if gpus else " (CPU processes, gloo)"),
            f"disk: {self.facts.get('disk_free_bytes', 0) / 1e9:.1f} GB free "
            f"at {self.facts.get('disk_path')}",
        ]
        if self.model_info is not None:
            lines.append(f"model: {self.model_path}: {self.model_info.parameter_count:,} params")
        return lines

    def check(self) -> None:
        """Raise VeriError with every problem, one line each."""
        if self.problems:
            raise VeriError(self.problems)


def _probe(conn: Connection, python: str, veri_home: str) -> dict[str, Any]:
    host = conn.spec.alias
    res = conn.run([python, "-c", PROBE_SCRIPT, veri_home], timeout=120)
    if res.exit_status == 127 or (res.exit_status != 0 and b"not found" in res.stderr):
        raise VeriError(
            f"{python!r} not found on {host}; install Python >= 3.11 there or set "
            "VERI_REMOTE_PYTHON to its interpreter",
            key="host",
        )
    try:
        return json.loads(res.stdout.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise VeriError(
            f"{python} on {host} failed the preflight probe: {res.error_line()}", key="host"
        ) from None


def _gpus(facts: dict[str, Any]) -> list[dict[str, Any]]:
    # nvidia-smi names the boards even when torch is CPU-only; torch's view is what trains.
    return facts.get("cuda") or facts.get("nvidia_smi") or []


def run_preflight(
    conn: Connection,
    *,
    model: str | None,
    gpu_count: int = 1,
    full_finetune: bool = True,
    dataset_bytes: int = 0,
) -> Preflight:
    """Probe the host and find the model; problems are collected, not raised (see `check`)."""
    python, host = remote_python(), conn.spec.alias
    facts = _probe(conn, python, remote_veri_home())
    home = facts["home"]
    pf = Preflight(host, python, facts, home, expand_home(remote_veri_home(), home), _gpus(facts))
    problems = pf.problems
    version = tuple(int(x) for x in facts["python"].split(".")[:2])
    if version < MIN_PYTHON:
        problems.append(
            Refusal("host", f"{python} on {host} is Python {facts['python']}; the trainer "
                        "needs >= 3.11: set VERI_REMOTE_PYTHON to a newer interpreter")
        )  # fmt: skip
    if not facts.get("torch"):
        problems.append(
            Refusal("host", f"torch is not importable by {python} on {host} "
                        f"({facts.get('torch_error')}); pip install torch there")
        )  # fmt: skip
    if facts.get("missing"):
        names = " ".join(facts["missing"])
        problems.append(Refusal("host", f"missing on {host}: {names}; pip install {names}"))
    if facts.get("torch") and facts.get("nvidia_smi") and not facts.get("cuda"):
        problems.append(
            Refusal("host", f"nvidia-smi on {host} shows {len(facts['nvidia_smi'])} GPUs "
                        f"but torch {facts['torch']} cannot use CUDA; install a CUDA build "
                        "of torch there")
        )  # fmt: skip
    if pf.gpus and len(pf.gpus) < gpu_count:
        problems.append(
            Refusal("gpu_count", f"{gpu_count} requested but {host} has {len(pf.gpus)} "
                        f"CUDA GPUs; set gpu_count to at most {len(pf.gpus)}")
        )  # fmt: skip
    if model:
        _check_model(conn, pf, model)
    need = dataset_bytes + DISK_MARGIN_BYTES + (pf.model_bytes if full_finetune else 0)
    free = facts.get("disk_free_bytes", 0)
    if free < need:
        problems.append(
            Refusal("host", f"{host} has {free / 1e9:.1f} GB free at {facts.get('disk_path')}"
                        f", the job needs about {need / 1e9:.1f} GB; free some space there")
        )  # fmt: skip
    return pf


def _check_model(conn: Connection, pf: Preflight, model: str) -> None:
    sftp = conn.sftp()
    hub = remote_hub_cache(conn, pf.home) if is_hub_id(model) else None
    folder = locate_model(sftp, model, pf.home, hub)
    if folder is None:
        where = "that path" + (f" and in the Hub cache {hub}" if hub else "")
        pf.problems.append(
            Refusal("model", f"{model} not found on {pf.host} (looked for config.json at "
                        f"{where}); copy the model there or pass its path on the remote host")
        )  # fmt: skip
        return
    try:
        pf.model_info, pf.model_bytes = remote_model_info(sftp, model, folder)
        pf.model_path = folder
    except VeriError as exc:
        pf.problems.extend(exc.errors)


# Free space and filesystem id at each path's nearest existing folder (the job folder and
# the output dir do not exist yet): one [path, free bytes, st_dev] row per argument.
DISK_SCRIPT = r"""
import json, os, sys
rows = []
for raw in sys.argv[1:]:
    path = os.path.expanduser(raw)
    while not os.path.isdir(path):
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    rows.append([raw, st.f_bavail * st.f_frsize, os.stat(path).st_dev])
print(json.dumps(rows))
"""


def remote_places(conn: Connection, pf: Preflight, output: str | None) -> tuple[Place, Place]:
    """Where the job writes on the host: its jobs folder (checkpoints) and the output dir
    (the job folder's own `output/` when none is given), as `Place`s named `host:path`."""
    jobs_dir = posixpath.join(pf.veri_home, "jobs")
    res = conn.run([pf.python, "-c", DISK_SCRIPT, jobs_dir, output or jobs_dir], timeout=60)
    try:
        rows = json.loads(res.stdout.decode("utf-8").strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise VeriError(f"free space on {pf.host}: {res.error_line()}", key="disk") from None
    job, out = (Place(f"{pf.host}:{path}", int(free), int(dev)) for path, free, dev in rows)
    return job, out


def check_memory(pf: Preflight, plan: Any) -> Row:
    """Refuse (VeriError, `host_memory`) a plan whose host memory per node exceeds the
    host's MemAvailable, as the probe read it (veri_tui.launch.memcheck); else its row."""
    return memcheck.check(plan, pf.facts.get("mem_available_bytes"), pf.host)


def check_disk(conn: Connection, pf: Preflight, disk: Any, output: str | None) -> Row:
    """Refuse (VeriError) a job whose host cannot hold what it writes (the plan's `disk`,
    veri_tui.launch.diskcheck); else its preflight row."""
    job, out = remote_places(conn, pf, output)
    problems = refusals(disk, job, out)
    if problems:
        raise VeriError(problems)
    return row(disk, job, out)
