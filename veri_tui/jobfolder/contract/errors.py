"""The exception types a job raises on purpose, each carrying its failure code.

Codes and attribution are veri_tui/jobfolder/contract/status.py's (contracts section 6). Raising
`TrainerError(code, message)` anywhere in a rank makes the failure report carry that code; other
exceptions are classified by the rule table (veri_tui/jobfolder/failures/failure_rules.py: OOM,
communication errors, ...). Here, not in veri_tui/trainer/, because the planning core raises
`DataError` too: it reads the dataset by the same rules (veri_tui/jobfolder/data/rows.py).
"""

from __future__ import annotations

from veri_tui.jobfolder.contract.status import ATTRIBUTION, FailureCode

__all__ = ["ConfigError", "DataError", "ModelLoadError", "TrainerError"]


class TrainerError(Exception):
    """An expected failure with a known code, e.g. a malformed dataset row."""

    def __init__(self, code: str, message: str) -> None:
        if code not in ATTRIBUTION:
            raise ValueError(f"unknown failure code {code!r}")
        self.code = code
        self.message = message
        super().__init__(message)


class DataError(TrainerError):
    """A dataset problem; the message names the file and line. `line` (when the rank that
    found it knows it) lets ranks that checked different rows agree on the first bad one."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(FailureCode.DATA_ERROR, message)
        self.line = line


class ModelLoadError(TrainerError):
    """The model directory is missing, incomplete or unreadable."""

    def __init__(self, message: str) -> None:
        super().__init__(FailureCode.MODEL_LOAD_ERROR, message)


class ConfigError(TrainerError):
    """The job spec asks for something this trainer cannot do."""

    def __init__(self, message: str) -> None:
        super().__init__(FailureCode.CONFIG_ERROR, message)
