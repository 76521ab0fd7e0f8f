"""What NVML says about a node's GPUs: the fleet probe's health facts, one JSON line per node.

    python -m veri_tui.trainer.gpuhealth        prints `VERI_HEALTH {json}`

Read with nvidia-ml-py (`import pynvml`), when installed and a driver answers: the driver and CUDA
versions, the GPU count, and per GPU its ECC errors (uncorrected, volatile and aggregate), remapped
rows (pending, failed) and pending page retirements, the XID events seen (NVML's event set for a
moment, and the kernel log's `NVRM: Xid` lines where it is readable), PCIe generation and width
against their maximum, SM clock against its maximum with the throttle reasons, temperature. `dcgmi
diag -r 1` when DCGM is installed. Nothing is judged here: the rules are the launcher's
(veri_tui/jobfolder/probe/probe_health.py), so one node's facts are compared with the others'.
Without NVML or a driver the line says why (`"nvml": false`). No torch needed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

MARK = "VERI_HEALTH "
XID_WAIT_MS = 100
XID_LINE = re.compile(r"NVRM: Xid \(([^)]*)\): (\d+)")


def _try(call: Callable[..., Any] | None, *args: Any) -> Any:
    """NVML's answer, or None where the GPU does not support the query (or it fails)."""
    if call is None:
        return None
    try:
        return call(*args)
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and kin: the fact is unknown
        return None


def _ask(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.<name>(*args)``; None where this nvidia-ml-py lacks the call (older releases
    have no row remapping) or the GPU does not answer it."""
    return _try(getattr(nvml, name, None), *args)


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _ecc(nvml: Any, handle: Any) -> dict[str, Any]:
    # NVML's enum values (nvml.h), for a binding that does not name them.
    unc = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)
    corr = getattr(nvml, "NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)
    volatile = getattr(nvml, "NVML_VOLATILE_ECC", 0)
    aggregate = getattr(nvml, "NVML_AGGREGATE_ECC", 1)
    total = "nvmlDeviceGetTotalEccErrors"
    return {
        "uncorrected_volatile": _ask(nvml, total, handle, unc, volatile),
        "uncorrected_aggregate": _ask(nvml, total, handle, unc, aggregate),
        "corrected_volatile": _ask(nvml, total, handle, corr, volatile),
    }


def _throttle(nvml: Any, handle: Any) -> list[str]:
    """The names of the clock event (throttle) reasons now in force."""
    call = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None
    )
    mask = _try(call, handle) if call else None
    if not mask:
        return []
    names = []
    for attr in dir(nvml):
        if attr.startswith("nvmlClocksThrottleReason") and attr != "nvmlClocksThrottleReasonAll":
            bit = getattr(nvml, attr)
            if isinstance(bit, int) and bit and mask & bit == bit:
                names.append(attr.removeprefix("nvmlClocksThrottleReason"))
    return sorted(set(names))


def _gpu(nvml: Any, index: int) -> dict[str, Any]:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    remapped = _ask(nvml, "nvmlDeviceGetRemappedRows", h)  # (corr, unc, pending, failed)
    pending_pages = _ask(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", h)
    sm = getattr(nvml, "NVML_CLOCK_SM", 1)
    return {
        "index": index,
        "name": _text(_ask(nvml, "nvmlDeviceGetName", h)),
        "ecc": _ecc(nvml, h),
        "remapped_rows": None if remapped is None else {
            "corrected": remapped[0], "uncorrected": remapped[1],
            "pending": bool(remapped[2]), "failed": bool(remapped[3]),
        },
        "retired_pages_pending": None if pending_pages is None else bool(pending_pages),
        "pcie": {
            "gen": _ask(nvml, "nvmlDeviceGetCurrPcieLinkGeneration", h),
            "max_gen": _ask(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", h),
            "width": _ask(nvml, "nvmlDeviceGetCurrPcieLinkWidth", h),
            "max_width": _ask(nvml, "nvmlDeviceGetMaxPcieLinkWidth", h),
        },
        "sm_clock_mhz": _ask(nvml, "nvmlDeviceGetClockInfo", h, sm),
        "sm_clock_max_mhz": _ask(nvml, "nvmlDeviceGetMaxClockInfo", h, sm),
        "throttle": _throttle(nvml, h),
        "temperature_c": _ask(nvml, "nvmlDeviceGetTemperature", h,
                              getattr(nvml, "NVML_TEMPERATURE_GPU", 0)),  # fmt: skip
    }  # fmt: skip


def _xid_events(nvml: Any, count: int) -> list[dict[str, Any]]:
    """XID events NVML delivers within XID_WAIT_MS (those the driver raises meanwhile)."""
    try:
        events = nvml.nvmlEventSetCreate()
    except Exception:  # noqa: BLE001 - no event support: the kernel log is the other source
        return []
    seen: list[dict[str, Any]] = []
    xid = getattr(nvml, "nvmlEventTypeXidCriticalError", 8)
    try:
        for i in range(count):
            _ask(nvml, "nvmlDeviceRegisterEvents", nvml.nvmlDeviceGetHandleByIndex(i), xid,
                 events)  # fmt: skip
        while True:
            data = _ask(nvml, "nvmlEventSetWait", events, XID_WAIT_MS)
            if data is None:
                break
            seen.append({"gpu": _text(_ask(nvml, "nvmlDeviceGetName", data.device)),
                         "xid": int(data.eventData), "source": "nvml"})  # fmt: skip
    except Exception:  # noqa: BLE001 - a board without events: the kernel log still counts
        pass
    finally:
        _ask(nvml, "nvmlEventSetFree", events)
    return seen


def kernel_xids(text: str | None = None) -> list[dict[str, Any]] | None:
    """`NVRM: Xid (PCI:...): 79, ...` lines of the kernel log; None when it cannot be read."""
    if text is None:
        try:
            done = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        if done.returncode != 0:
            return None
        text = done.stdout
    return [{"gpu": m.group(1), "xid": int(m.group(2)), "source": "kernel log"}
            for m in XID_LINE.finditer(text)]  # fmt: skip


def dcgm_diag() -> dict[str, Any] | None:
    """`dcgmi diag -r 1`'s verdict where DCGM is installed (None: it is not)."""
    dcgmi = shutil.which("dcgmi")
    if dcgmi is None:
        return None
    try:
        done = subprocess.run([dcgmi, "diag", "-r", "1"], capture_output=True, text=True,
                              timeout=300)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return {"passed": False, "detail": f"{type(exc).__name__}: {exc}"}
    failed = [ln.strip(" |") for ln in done.stdout.splitlines() if re.search(r"\bFail", ln)]
    detail = "; ".join(failed) or (done.stderr.strip().splitlines() or [""])[-1]
    return {"passed": done.returncode == 0 and not failed, "detail": detail}


def read(nvml: Any = None) -> dict[str, Any]:
    """This node's health facts; ``nvml`` the pynvml module (None: imported if installed)."""
    out: dict[str, Any] = {"node": os.environ.get("SLURM_NODEID")}
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[no-redef]
        except ImportError:
            return {**out, "nvml": False, "reason": "nvidia-ml-py is not installed"}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - no driver or library: a CPU node
        return {**out, "nvml": False, "reason": f"{type(exc).__name__}: {exc}"}
    try:
        count = int(nvml.nvmlDeviceGetCount())
        cuda = _ask(nvml, "nvmlSystemGetCudaDriverVersion")
        out.update(
            nvml=True,
            driver=_text(_ask(nvml, "nvmlSystemGetDriverVersion")),
            cuda=None if cuda is None else f"{cuda // 1000}.{cuda % 1000 // 10}",
            count=count,
            gpus=[_gpu(nvml, i) for i in range(count)],
            xid=_xid_events(nvml, count),
            kernel_xid=kernel_xids(),
            dcgm=dcgm_diag(),
        )
    finally:
        _ask(nvml, "nvmlShutdown")
    return out


def main() -> int:
    print(MARK + json.dumps(read()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
