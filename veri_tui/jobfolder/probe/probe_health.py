"""The rules the fleet probe applies to each node's GPU health facts
(veri_tui/trainer/gpuhealth.py).

A node is sick, and refused by name, for: uncorrected ECC errors (volatile: since the driver
loaded), a remapped-row failure or a remap pending (the GPU needs a reset), pending page
retirements, a critical XID (double-bit ECC, row remapping, NVLink, fallen off the bus,
contained or uncontained memory errors, GSP errors), a PCIe link narrower than its maximum,
clocks held down by a hardware or thermal slowdown, a failed `dcgmi diag -r 1`. Noted, not
refused: a PCIe generation below its maximum (idle GPUs lower their link speed; NVML reads
it between the probe's transfers), other XIDs, the software power cap. Every node must have
the same driver, CUDA version and GPU count. Without NVML on every node: one line saying so.
"""

from __future__ import annotations

from typing import Any

#: XIDs that mean the hardware needs attention (NVIDIA's XID catalog): 48 double-bit ECC,
#: 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92 high single-bit rate,
#: 94/95 contained/uncontained ECC, 119/120 GSP errors.
CRITICAL_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
#: Throttle reasons that slow a busy GPU for a hardware or thermal cause.
SLOWDOWNS = frozenset({"HwSlowdown", "HwThermalSlowdown", "HwPowerBrakeSlowdown",
                       "SwThermalSlowdown"})  # fmt: skip


def _gpu_findings(g: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, notes) of one GPU."""
    bad: list[str] = []
    notes: list[str] = []
    ecc = g.get("ecc") or {}
    if ecc.get("uncorrected_volatile"):
        bad.append(f"{ecc['uncorrected_volatile']} uncorrected ECC errors since the driver loaded")
    elif ecc.get("uncorrected_aggregate"):
        notes.append(f"{ecc['uncorrected_aggregate']} uncorrected ECC errors in its lifetime")
    rows = g.get("remapped_rows") or {}
    if rows.get("failed"):
        bad.append("a row remapping failed (the memory cannot be repaired: replace the GPU)")
    if rows.get("pending"):
        bad.append("a row remapping is pending (reset the GPU to apply it)")
    if g.get("retired_pages_pending"):
        bad.append("page retirements are pending (reset the GPU to apply them)")
    pcie = g.get("pcie") or {}
    if pcie.get("width") and pcie.get("max_width") and pcie["width"] < pcie["max_width"]:
        bad.append(f"PCIe link x{pcie['width']} of x{pcie['max_width']} (reseat or check the slot)")
    if pcie.get("gen") and pcie.get("max_gen") and pcie["gen"] < pcie["max_gen"]:
        notes.append(f"PCIe Gen{pcie['gen']} of Gen{pcie['max_gen']} (idle GPUs lower it)")
    slow = sorted(SLOWDOWNS & set(g.get("throttle") or ()))
    if slow:
        clock = g.get("sm_clock_mhz")
        top = g.get("sm_clock_max_mhz")
        at = f" (SM {clock} of {top} MHz)" if clock and top else ""
        bad.append(f"clocks held down by {', '.join(slow)}{at}")
    elif "SwPowerCap" in (g.get("throttle") or ()):
        notes.append("at its software power cap")
    return bad, notes


def _xid_findings(facts: dict[str, Any]) -> tuple[list[str], list[str]]:
    events = list(facts.get("xid") or []) + list(facts.get("kernel_xid") or [])
    bad = sorted({f"XID {e['xid']} on {e.get('gpu') or 'a GPU'} ({e.get('source')})"
                  for e in events if int(e["xid"]) in CRITICAL_XIDS})  # fmt: skip
    other = sorted({int(e["xid"]) for e in events if int(e["xid"]) not in CRITICAL_XIDS})
    notes = [f"XIDs {', '.join(map(str, other))} seen (not hardware faults)"] if other else []
    return bad, notes


def node_findings(facts: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(problems, notes) of one node's facts; a node without NVML has neither."""
    if not facts.get("nvml"):
        return [], []
    bad, notes = _xid_findings(facts)
    for g in facts.get("gpus") or []:
        gb, gn = _gpu_findings(g)
        name = f"GPU {g.get('index')}"
        bad += [f"{name}: {p}" for p in gb]
        notes += [f"{name}: {n}" for n in gn]
    dcgm = facts.get("dcgm")
    if dcgm is not None and not dcgm.get("passed"):
        bad.append(f"dcgmi diag -r 1 failed: {dcgm.get('detail') or 'see dcgmi diag -r 1'}")
    return bad, notes


def agreement(labels: list[str], facts: list[dict[str, Any]]) -> list[str]:
    """One line per fact (driver, CUDA, GPU count) that differs between the nodes."""
    out = []
    for key, what in (("driver", "driver"), ("cuda", "CUDA version"), ("count", "GPU count")):
        seen = [f.get(key) if f.get("nvml") else None for f in facts]
        if len({str(s) for s in seen}) > 1:
            each = ", ".join(f"{label}: {s if s is not None else 'no GPU'}"
                             for label, s in zip(labels, seen, strict=True))  # fmt: skip
            out.append(f"the nodes differ in {what} ({each}); every node must have the same")
    return out


def summary(labels: list[str], facts: list[dict[str, Any]]) -> list[str]:
    """The health lines: one per node with NVML, or one line when no node has a GPU."""
    if not any(f.get("nvml") for f in facts):
        reasons = sorted({str(f.get("reason")) for f in facts})
        return [f"gpu health: no NVIDIA GPU here ({'; '.join(reasons)}); NVML checks skipped"]
    out = []
    for label, f in zip(labels, facts, strict=True):
        if not f.get("nvml"):
            out.append(f"gpu health: {label}: no GPU ({f.get('reason')})")
            continue
        bad, notes = node_findings(f)
        dcgm = "" if f.get("dcgm") is None else ", dcgmi diag -r 1 " + (
            "passed" if f["dcgm"].get("passed") else "FAILED")  # fmt: skip
        state = "SICK" if bad else "ok"
        gpus = f"{f.get('count')} GPU" + ("s" if f.get("count") != 1 else "")
        out.append(f"gpu health: {label}: {state}: {gpus}, driver "
                   f"{f.get('driver')}, CUDA {f.get('cuda')}{dcgm}"
                   + "".join(f"; {n}" for n in bad + notes))  # fmt: skip
    return out
