"""What an SSH host reports before anything is uploaded: is it able to run the job?

One remote Python run (a fixed script; the only arguments are quoted argv entries) reports
the Python and torch versions, the CUDA GPUs (torch, and nvidia-smi when present), whether the
trainer's libraries are importable (found on its path; torch imported where a GPU device node
or nvidia-smi is present, else read from its version file: nothing there could show torch a
GPU, and importing it cost the probe 2 CPU-s of its 2.2), the free disk under the remote veri
home and the free memory. The model is found and counted over SFTP (remote_model). The
answer is the host's `HostFacts` (veri_tui/launch/facts.py); every problem becomes one
Refusal line. `DISK_SCRIPT` measures free space where a job writes (ssh/host.py `places`).
"""

from __future__ import annotations

import json
import os
from typing import Any

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.knobs.trackers import MODULES, missing_message, trackers_of
from veri_tui.launch.device import cuda_problem
from veri_tui.launch.host import HostFacts
from veri_tui.launch.ssh.connection import Connection
from veri_tui.launch.ssh.remote_model import (
    expand_home,
    is_hub_id,
    locate_model,
    remote_hub_cache,
    remote_model_info,
)

MIN_PYTHON = (3, 11)
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
out["trackers"] = [m for m in ("tensorboard", "trackio", "wandb", "mlflow")
                   if importlib.util.find_spec(m) is not None]
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
try:
    devs = os.listdir("/dev")
except OSError:
    devs = []
gpu = smi or "kfd" in devs or any(d.startswith("nvidia") and d[6:].isdigit() for d in devs)
spec = importlib.util.find_spec("torch")
read = False
if spec is not None and not gpu and spec.submodule_search_locations:
    # No GPU device here (NVIDIA's, or ROCm's /dev/kfd), so torch would see none: its
    # version file says the rest, without the seconds of importing it (a probe runs per
    # plan and launch on a host). A ROCm build is imported whatever the devices say.
    try:
        version = {}
        with open(os.path.join(list(spec.submodule_search_locations)[0], "version.py")) as f:
            exec(f.read(), version)
        if not version.get("hip"):
            out.update(torch=str(version["__version__"]), cuda_build=version.get("cuda"), cuda=[])
            read = True
    except Exception:
        pass
if not read:
    try:
        import torch
        out["torch"] = torch.__version__
        out["cuda_build"] = torch.version.cuda
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        out["cuda"] = [{"name": torch.cuda.get_device_name(i),
                        "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
                       for i in range(n)]
    except Exception as exc:
        out["torch"] = None
        out["torch_error"] = f"{type(exc).__name__}: {exc}"
        out["cuda"] = []
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
        facts: dict[str, Any] = json.loads(res.stdout.decode("utf-8").strip().splitlines()[-1])
        return facts
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
    report_to: Any = None,
) -> HostFacts:
    """Probe the host and find the model; problems are collected, not raised (see `check`).
    `report_to`: the job's trackers, each refused when the host cannot import it."""
    python, host = remote_python(), conn.spec.alias
    facts = _probe(conn, python, remote_veri_home())
    home = facts["home"]
    pf = HostFacts(host, python, facts, home, expand_home(remote_veri_home(), home), _gpus(facts))
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
    have = set(facts.get("trackers") or [])
    for name in (n for n in trackers_of(report_to) if MODULES[n] not in have):
        problems.append(Refusal("report_to", missing_message(name, f"on {host}")))
    if facts.get("torch") and facts.get("nvidia_smi") and not facts.get("cuda"):
        found = (len(facts["nvidia_smi"]), "nvidia-smi")
        problems += [p for p in [cuda_problem(facts, found, host, " there")] if p is not None]
    if pf.gpus and len(pf.gpus) < gpu_count:
        problems.append(
            Refusal("gpu_count", f"{gpu_count} requested but {host} has {len(pf.gpus)} "
                        f"CUDA GPUs; set gpu_count to at most {len(pf.gpus)}")
        )  # fmt: skip
    if model:
        _check_model(conn, pf, model)
    pf.model_known = not model or pf.model_info is not None
    need = dataset_bytes + DISK_MARGIN_BYTES + (pf.model_bytes if full_finetune else 0)
    free = facts.get("disk_free_bytes", 0)
    if free < need:
        problems.append(
            Refusal("host", f"{host} has {free / 1e9:.1f} GB free at {facts.get('disk_path')}"
                        f", the job needs about {need / 1e9:.1f} GB; free some space there")
        )  # fmt: skip
    return pf


def _check_model(conn: Connection, pf: HostFacts, model: str) -> None:
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
