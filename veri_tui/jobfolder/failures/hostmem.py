"""Host memory while a job runs: was a rank's SIGKILL likely the out-of-memory killer?

The kernel's OOM killer ends a process with SIGKILL and tells nobody; torchrun's summary then
shows a bare ``exitcode: -9``. So the supervisor samples, every second while torchrun runs,
how full the node is (``1 - MemAvailable/MemTotal`` from /proc/meminfo) and, where the job's
memory cgroup has a limit, how full that is (usage less reclaimable page cache, over the
limit). It also reads the cgroup's ``oom_kill`` counter at the start and at the end. A read
costs tens of microseconds. When a rank died by SIGKILL, ``MemoryWatch.kill_note`` says
whether memory was near full around that time (the failure report's hint; docs/jobs.md).

Stdlib only: the supervisor imports this.
"""

from __future__ import annotations

import collections
import time
from pathlib import Path

NEAR_FULL = 0.95  # used fraction at which a SIGKILL is likely the OOM killer's
INTERVAL_S = 1.0
WINDOW_S = 10.0  # samples this long before the death (whole-second time) are looked at
_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a huge number


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""


def _keyed(text: str) -> dict[str, int]:
    """``key value`` lines (memory.stat, memory.events, memory.oom_control, meminfo in kB)."""
    out = {}
    for line in text.splitlines():
        bits = line.replace(":", " ").split()
        if len(bits) >= 2 and bits[1].isdigit():
            out[bits[0]] = int(bits[1])
    return out


def node_used(meminfo: Path = Path("/proc/meminfo")) -> float | None:
    """The node's used fraction, 1 - MemAvailable/MemTotal; None when unreadable."""
    info = _keyed(_read(meminfo))
    total, avail = info.get("MemTotal"), info.get("MemAvailable")
    if not total or avail is None:
        return None
    return 1.0 - avail / total


class Cgroup:
    """The memory cgroup files of this process (cgroup v2, else the v1 memory controller)."""

    def __init__(self, folder: Path, v2: bool) -> None:
        self.folder = folder
        self.v2 = v2

    def limit(self) -> int | None:
        """The limit in bytes, or None when there is none."""
        raw = _read(self.folder / ("memory.max" if self.v2 else "memory.limit_in_bytes")).strip()
        return int(raw) if raw.isdigit() and int(raw) < _UNLIMITED else None

    def used(self) -> float | None:
        """Working set (usage less inactive page cache, as kubelet counts) over the limit;
        None without a limit."""
        limit = self.limit()
        usage = _read(self.folder / ("memory.current" if self.v2 else "memory.usage_in_bytes"))
        if limit is None or not usage.strip().isdigit():
            return None
        stat = _keyed(_read(self.folder / "memory.stat"))
        cache = stat.get("inactive_file" if self.v2 else "total_inactive_file", 0)
        return max(int(usage) - cache, 0) / max(limit, 1)

    def oom_kills(self) -> int | None:
        """The kernel's count of OOM kills in this cgroup; None when not shown."""
        events = _read(self.folder / ("memory.events" if self.v2 else "memory.oom_control"))
        return _keyed(events).get("oom_kill")


def find_cgroup(proc: Path = Path("/proc/self")) -> Cgroup | None:
    """This process's memory cgroup folder, from /proc/self/cgroup and mountinfo."""
    paths = {}  # controller ("" for v2) -> path inside the hierarchy
    for line in _read(proc / "cgroup").splitlines():
        bits = line.split(":", 2)
        if len(bits) == 3:
            for ctrl in bits[1].split(",") if bits[1] else [""]:
                paths[ctrl] = bits[2]
    for line in _read(proc / "mountinfo").splitlines():
        left, _, right = line.partition(" - ")
        fields, fstype = left.split(), right.split()
        if len(fields) < 5 or len(fstype) < 3:
            continue
        root, mount = fields[3], Path(fields[4])
        if fstype[0] == "cgroup2" and "" in paths:
            key, v2 = "", True
        elif fstype[0] == "cgroup" and "memory" in fstype[2].split(",") and "memory" in paths:
            key, v2 = "memory", False
        else:
            continue
        rel = paths[key].removeprefix(root)
        for folder in (
            mount / rel.lstrip("/"),
            mount,
        ):  # a cgroup namespace shows its root
            probe = "memory.current" if v2 else "memory.usage_in_bytes"
            if (folder / probe).exists():
                return Cgroup(folder, v2)
    return None


class MemoryWatch:
    """Samples memory pressure while torchrun runs; the supervisor calls ``poll`` often."""

    def __init__(self, meminfo: Path = Path("/proc/meminfo"), cgroup: Cgroup | None = None):
        self.meminfo = meminfo
        self.cgroup = cgroup
        self.samples: collections.deque[tuple[float, float | None, float | None]] = (
            collections.deque(maxlen=300)
        )
        self.kills_at_start = cgroup.oom_kills() if cgroup else None
        self._next = 0.0

    @classmethod
    def for_this_process(cls) -> MemoryWatch:
        """The node's /proc/meminfo and this process's memory cgroup (the ranks inherit it)."""
        return cls(cgroup=find_cgroup())

    def poll(self) -> None:
        """Take a sample when INTERVAL_S has passed since the last one."""
        now = time.monotonic()
        if now >= self._next:
            self._next = now + INTERVAL_S
            self.sample()

    def sample(self, at: float | None = None) -> None:
        """Record (wall time, node used, cgroup used) now; ``at`` overrides the wall time."""
        group = self.cgroup.used() if self.cgroup else None
        self.samples.append((time.time() if at is None else at, node_used(self.meminfo), group))

    def kill_note(self, died_at: float) -> str:
        """Why a SIGKILL at ``died_at`` (whole seconds) looks like the OOM killer, or ""."""
        if self.cgroup and self.kills_at_start is not None:
            kills = (self.cgroup.oom_kills() or 0) - self.kills_at_start
            if kills > 0:
                plural = "s" if kills > 1 else ""
                return f"the kernel counted {kills} out-of-memory kill{plural} in the job's cgroup"
        near = [s for s in self.samples if died_at - WINDOW_S <= s[0] < died_at + 2]
        node = max((s[1] for s in near if s[1] is not None), default=0.0)
        group = max((s[2] for s in near if s[2] is not None), default=0.0)
        if group >= NEAR_FULL and group >= node:
            return f"the job's memory cgroup was at {group:.0%} of its limit"
        if node >= NEAR_FULL:
            return f"the node was at {node:.0%} of its memory"
        return ""
