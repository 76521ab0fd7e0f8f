"""The failure panel of the run monitor: who failed, with which code, and whose fault.

Reads the `error` object of a failed job record (interfaces section 2): `summary` (the
`rank r/n (node, local_rank) failed: ...` line), `code`, `attribution`, `rank`, `node`,
`local_rank`, `world_size`, `message` and `traceback`.
"""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from veri_tui.jobfolder.contract.record import JobError
from veri_tui.jobfolder.contract.status import Attribution, FailureCode
from veri_tui.jobfolder.failures.failures import ONE_LINE_CODES, TRACEBACK_FILE

# Platform failures are credited back: say so, the user should not debug those.
_ATTRIBUTION_NOTE: dict[str, str] = {
    Attribution.CUSTOMER: "the job's input or settings: fix and relaunch",
    Attribution.PLATFORM: "the machine or network: not your job's fault, credited back",
    Attribution.PENDING: "not classified yet",
}


class FailurePanel(Widget):
    """Shown only for a failed job; the traceback is trimmed to its last lines."""

    error: reactive[JobError | None] = reactive(None, layout=True)
    max_traceback_lines: int = 12

    def watch_error(self, error: JobError | None) -> None:
        self.display = error is not None

    def render(self) -> Text:
        err: JobError = self.error or {}
        code = err.get("code") or FailureCode.UNKNOWN
        attribution = err.get("attribution") or Attribution.PENDING
        out = Text()
        out.append("FAILED ", style="bold red")
        out.append(f"code {code}", style="bold")
        out.append(f"  attribution {attribution}", style="bold")
        out.append(f" ({_ATTRIBUTION_NOTE.get(attribution, '')})\n", style="dim")
        summary = err.get("summary") or err.get("message") or ""
        if err.get("rank") is not None and not summary.startswith("rank "):
            world = err.get("world_size", "?")
            out.append(
                f"rank {err['rank']}/{world} (node {err.get('node', 0)}, "
                f"local_rank {err.get('local_rank', err['rank'])})\n"
            )
        if summary:
            out.append(f"{summary}\n")
        message = err.get("message")
        if message and message not in summary:
            out.append(f"{message}\n")
        tb = (err.get("traceback") or "").rstrip().splitlines()
        if tb and code in ONE_LINE_CODES:  # the summary names the file and line: enough
            out.append(f"traceback: {TRACEBACK_FILE} in the job folder", style="dim")
        elif tb:
            out.append("traceback (last lines):\n", style="dim")
            out.append("\n".join(tb[-self.max_traceback_lines :]), style="dim")
        return out
