"""Failure codes and the exception types the trainer raises on purpose.

Codes and attribution follow contracts section 6. Raising `TrainerError(code, message)`
anywhere in a rank makes the failure report carry that code; other exceptions are
classified by the report module (OOM, communication errors, ...).
"""

from __future__ import annotations

CUSTOMER = "customer"
PLATFORM = "platform"
PENDING = "pending"

#: error.code -> error.attribution
ATTRIBUTION: dict[str, str] = {
    "CUDA_OOM": CUSTOMER,
    "DATA_ERROR": CUSTOMER,
    "CONFIG_ERROR": CUSTOMER,
    "MODEL_LOAD_ERROR": CUSTOMER,
    "RANK_LOST": PLATFORM,
    "RANK_HUNG": PLATFORM,  # no rank advanced for hang_timeout_s (trainer/watchdog.py)
    "COMM_ERROR": PLATFORM,
    "HARDWARE_ERROR": PLATFORM,
    "UNKNOWN": PENDING,
}


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
        super().__init__("DATA_ERROR", message)
        self.line = line


class ModelLoadError(TrainerError):
    """The model directory is missing, incomplete or unreadable."""

    def __init__(self, message: str) -> None:
        super().__init__("MODEL_LOAD_ERROR", message)


class ConfigError(TrainerError):
    """The job spec asks for something this trainer cannot do."""

    def __init__(self, message: str) -> None:
        super().__init__("CONFIG_ERROR", message)
