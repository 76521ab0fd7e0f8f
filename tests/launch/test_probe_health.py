"""The fleet probe's GPU health rules, on facts read through a fake NVML (the GPU is the one
thing mocked: veri_tui/trainer/gpuhealth.py reads it as it reads pynvml, and
veri_tui/jobfolder/probe/probe_health.py judges what it read).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from veri_tui.jobfolder.probe import probe_health as health
from veri_tui.launch.probe.report import ProbeReport
from veri_tui.trainer import gpuhealth

KERNEL_XIDS = gpuhealth.kernel_xids  # the parser itself, before the fixture stubs the read


class NotSupported(Exception):
    """What pynvml raises for a query the board does not answer."""


HEALTHY = {
    "name": "NVIDIA H100 80GB HBM3", "ecc": (0, 0, 3), "remapped": (0, 0, 0, 0),
    "pages_pending": None, "pcie": (5, 5, 16, 16), "clock": (1980, 1980), "reasons": 0,
}  # fmt: skip


class FakeNvml:
    """pynvml's calls gpuhealth makes, answering from ``gpus`` (dicts like HEALTHY)."""

    NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_MEMORY_ERROR_TYPE_CORRECTED = 1, 0
    NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC = 0, 1
    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU = 1, 0
    nvmlClocksThrottleReasonGpuIdle = 0x1
    nvmlClocksThrottleReasonSwPowerCap = 0x4
    nvmlClocksThrottleReasonHwSlowdown = 0x8
    nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
    nvmlEventTypeXidCriticalError = 8

    def __init__(self, gpus: list[dict[str, Any]], driver: str = "550.54.15",
                 cuda: int = 12040, xid: list[int] | None = None) -> None:  # fmt: skip
        self.gpus, self.driver, self.cuda, self.xid = gpus, driver, cuda, list(xid or [])

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.cuda

    def nvmlDeviceGetHandleByIndex(self, i: int) -> dict[str, Any]:
        return self.gpus[i]

    def nvmlDeviceGetName(self, h: dict[str, Any]) -> bytes:
        return h["name"].encode()

    def nvmlDeviceGetTotalEccErrors(self, h: dict[str, Any], kind: int, counter: int) -> int:
        unc_volatile, unc_aggregate, corrected = h["ecc"]
        if kind == self.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return corrected
        return unc_volatile if counter == self.NVML_VOLATILE_ECC else unc_aggregate

    def nvmlDeviceGetRemappedRows(self, h: dict[str, Any]) -> tuple[int, int, int, int]:
        return h["remapped"]

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: dict[str, Any]) -> int:
        if h["pages_pending"] is None:
            raise NotSupported("Not Supported")  # Ampere and later: row remapping instead
        return int(h["pages_pending"])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: dict[str, Any]) -> int:
        return h["pcie"][0]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: dict[str, Any]) -> int:
        return h["pcie"][1]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: dict[str, Any]) -> int:
        return h["pcie"][2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: dict[str, Any]) -> int:
        return h["pcie"][3]

    def nvmlDeviceGetClockInfo(self, h: dict[str, Any], _clock: int) -> int:
        return h["clock"][0]

    def nvmlDeviceGetMaxClockInfo(self, h: dict[str, Any], _clock: int) -> int:
        return h["clock"][1]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: dict[str, Any]) -> int:
        return h["reasons"]

    def nvmlDeviceGetTemperature(self, h: dict[str, Any], _sensor: int) -> int:
        return 41

    def nvmlEventSetCreate(self) -> list[int]:
        return list(self.xid)

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, events: list[int]) -> None: ...
    def nvmlEventSetFree(self, events: list[int]) -> None: ...
    def nvmlEventSetWait(self, events: list[int], _ms: int) -> SimpleNamespace:
        if not events:
            raise NotSupported("Timeout")
        return SimpleNamespace(device=self.gpus[0], eventData=events.pop(0))


@pytest.fixture(autouse=True)
def _no_host_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    # This machine's kernel log and DCGM are not the fake GPUs'.
    monkeypatch.setattr(gpuhealth, "kernel_xids", lambda text=None: None)
    monkeypatch.setattr(gpuhealth, "dcgm_diag", lambda: None)


def _node(*changes: dict[str, Any], **nvml: Any) -> dict[str, Any]:
    return gpuhealth.read(FakeNvml([{**HEALTHY, **c} for c in changes], **nvml))


def test_a_healthy_node_reads_clean() -> None:
    facts = _node({}, {})
    assert facts["nvml"] and facts["count"] == 2 and facts["cuda"] == "12.4"
    assert facts["gpus"][0]["retired_pages_pending"] is None  # not supported: unknown
    assert health.node_findings(facts) == ([], [])
    assert health.summary(["n0"], [facts]) == [
        "gpu health: n0: ok: 2 GPUs, driver 550.54.15, CUDA 12.4"
    ]


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"ecc": (2, 2, 0)}, "GPU 1: 2 uncorrected ECC errors since the driver loaded"),
        ({"remapped": (0, 1, 1, 0)}, "GPU 1: a row remapping is pending (reset the GPU"),
        ({"remapped": (0, 9, 0, 1)}, "GPU 1: a row remapping failed"),
        ({"pages_pending": True}, "GPU 1: page retirements are pending"),
        ({"pcie": (5, 5, 8, 16)}, "GPU 1: PCIe link x8 of x16"),
        ({"reasons": 0x40, "clock": (1100, 1980)},
         "GPU 1: clocks held down by HwThermalSlowdown (SM 1100 of 1980 MHz)"),
    ],
)  # fmt: skip
def test_each_sick_gpu_is_named(change: dict[str, Any], said: str) -> None:
    bad, _notes = health.node_findings(_node({}, change))
    assert len(bad) == 1 and bad[0].startswith(said), bad


def test_what_is_only_noted() -> None:
    # An idle GPU's lower PCIe generation, the software power cap, lifetime ECC, other XIDs.
    facts = _node({"pcie": (1, 5, 16, 16), "reasons": 0x4 | 0x1, "ecc": (0, 1, 0)}, xid=[13])
    bad, notes = health.node_findings(facts)
    assert bad == []
    assert notes == ["XIDs 13 seen (not hardware faults)",
                     "GPU 0: 1 uncorrected ECC errors in its lifetime",
                     "GPU 0: PCIe Gen1 of Gen5 (idle GPUs lower it)",
                     "GPU 0: at its software power cap"]  # fmt: skip


def test_a_critical_xid_from_nvml_or_the_kernel_log_makes_a_node_sick() -> None:
    assert health.node_findings(_node({}, xid=[79]))[0] == [
        "XID 79 on NVIDIA H100 80GB HBM3 (nvml)"
    ]
    log = "[  12.3] NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE (double bit error)\n"
    facts = {**_node({}), "kernel_xid": KERNEL_XIDS(log)}
    assert health.node_findings(facts)[0] == ["XID 48 on PCI:0000:3b:00 (kernel log)"]


def test_a_sick_node_is_refused_by_name_and_unequal_nodes_too() -> None:
    n0 = _node({}, {})
    n1 = _node({}, {"remapped": (0, 1, 1, 0)}, driver="535.104.05")
    n2 = _node({})
    record = {"nodes": 3, "ranks_per_node": 2, "results": []}
    report = ProbeReport("hosts:a,b,c", ["a", "b", "c"], record, [n0, n1, n2])
    lines = [r.message for r in report.refusals()]
    assert lines[0].startswith("node 1 (b) is sick: GPU 1: a row remapping is pending")
    assert lines[0].endswith("leave it out (drop its --host) or pass --allow-slow-nodes to go "
                             "on at your own risk")  # fmt: skip
    assert lines[1:] == [
        "the nodes differ in driver (a: 550.54.15, b: 535.104.05, c: 550.54.15); every node "
        "must have the same",
        "the nodes differ in GPU count (a: 2, b: 2, c: 1); every node must have the same",
    ]


def test_without_nvml_it_says_so_once() -> None:
    class Missing(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("NVML Shared Library Not Found")

    facts = [gpuhealth.read(Missing([])) for _ in range(2)]
    assert not facts[0]["nvml"]
    assert health.summary(["a", "b"], facts) == [
        "gpu health: no NVIDIA GPU here (RuntimeError: NVML Shared Library Not Found); "
        "NVML checks skipped"
    ]
    assert health.agreement(["a", "b"], facts) == []


def test_an_older_binding_without_some_calls_reads_what_it_has() -> None:
    old = SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"Tesla V100",
    )  # fmt: skip
    facts = gpuhealth.read(old)
    assert facts["gpus"][0]["name"] == "Tesla V100" and facts["driver"] is None
    assert facts["gpus"][0]["remapped_rows"] is None and facts["gpus"][0]["ecc"] == {
        "uncorrected_volatile": None, "uncorrected_aggregate": None, "corrected_volatile": None,
    }  # fmt: skip
    assert health.node_findings(facts) == ([], [])
