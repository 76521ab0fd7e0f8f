"""Rank 0's metric lines: metrics.jsonl and log.txt, and the trackers of `report_to`.

Each line has Hugging Face Trainer's names (veri_tui/jobfolder/knobs/trackers.py): `loss`,
`grad_norm`, `learning_rate`, `epoch` (optimizer steps / steps per epoch), `eval_loss` on the steps
the job evaluates, beside `step`, `total_steps`, `tokens_per_s` and the memory peaks.

The trackers get the same numbers, named as Hugging Face's callbacks name them
(`train/loss`, `eval/loss`, ...), at the line's step. Each is imported on rank 0 only, and
only when named; where it writes, unless the user's environment says otherwise:

- tensorboard: event files under `<job>/tracking/tensorboard` (torch's SummaryWriter);
- trackio: its local store in `<job>/tracking/trackio` (TRACKIO_DIR, when set, wins),
  project `veri-tui` (TRACKIO_PROJECT), the run named after the job;
- wandb: `<job>/tracking` as WANDB_DIR; online or offline as WANDB_MODE says; its banners
  silenced (WANDB_SILENT), the run's page (online) or folder and sync command (offline)
  logged instead;
- mlflow: MLFLOW_TRACKING_URI, else a file store `<job>/tracking/mlruns`, experiment
  `veri-tui` (MLFLOW_EXPERIMENT_NAME), Hugging Face's raw names.

A tracker that cannot be imported fails the job at its start with one line (the launch
preflight refuses it before that); one that fails mid-run is closed with one log line and
the run goes on: metrics.jsonl keeps every line.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from veri_tui.jobfolder.contract.errors import ConfigError
from veri_tui.jobfolder.knobs.trackers import MODULES, hf_log_names, missing_message, trackers_of
from veri_tui.trainer.report import RankLog

#: (log, close, where it writes: a folder, a URI or a run's page, for the rank's log)
Sink = tuple[Callable[[dict[str, Any], int], None], Callable[[], None], str]


def metric_line(step: int, total: int, per_epoch: int, loss: float, lr: float,
                grad_norm: float, evaluated: float | None) -> dict[str, Any]:  # fmt: skip
    """The metric line of optimizer step `step` (1-based), before the rate and peaks."""
    metric: dict[str, Any] = {"step": step, "total_steps": total, "loss": round(loss, 6)}
    metric.update(learning_rate=lr, grad_norm=round(grad_norm, 6))
    metric["epoch"] = round(step / per_epoch, 4) if per_epoch else 0.0
    if evaluated is not None:
        metric["eval_loss"] = round(evaluated, 6)
    return metric


def run_config(cfg: Any) -> dict[str, Any]:
    """What a tracker records of the run: the method, the model and every knob."""
    from veri_tui.jobfolder.knobs import Hyperparameters, table

    knobs = {k.name: getattr(cfg, k.name) for k in table(Hyperparameters)}
    return {"method": cfg.method, "model": str(cfg.model_path), **knobs}


def _quiet() -> contextlib.AbstractContextManager[Any]:
    """trackio prints banners; the rank's log is for the job's own lines."""
    return contextlib.redirect_stdout(io.StringIO())


def _tensorboard(folder: Path, run: str, config: dict[str, Any]) -> Sink:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(folder / "tensorboard"))

    def log(metric: dict[str, Any], step: int) -> None:
        for name, value in hf_log_names(metric).items():
            writer.add_scalar(name, value, step)
        writer.flush()  # a line is visible to a running TensorBoard at once

    return log, writer.close, str(folder / "tensorboard")


def _trackio(folder: Path, run: str, config: dict[str, Any]) -> Sink:
    os.environ.setdefault("TRACKIO_DIR", str(folder / "trackio"))  # read at its import
    import trackio

    with _quiet():
        handle = trackio.init(project=os.environ.get("TRACKIO_PROJECT", "veri-tui"), name=run,
                              config=config, resume="allow", embed=False)  # fmt: skip

    finish = cast(Callable[[], None], handle.finish)  # unannotated in trackio

    def close() -> None:
        with _quiet():
            finish()

    def send(metric: dict[str, Any], step: int) -> None:
        handle.log(hf_log_names(metric), step=step)

    return send, close, os.environ["TRACKIO_DIR"]


def _wandb(folder: Path, run: str, config: dict[str, Any]) -> Sink:
    os.environ.setdefault("WANDB_DIR", str(folder))
    # Its banners and end-of-run summary would fill the ranks' stream log (torchrun.log);
    # the line Tracking writes to log.txt says where the run is instead.
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    handle = wandb.init(project=os.environ.get("WANDB_PROJECT", "veri-tui"), name=run,
                        id=run, resume="allow", config=config)  # fmt: skip
    where = handle.url  # None offline: the run's folder, uploaded later by `wandb sync`
    if where is None:
        where = f"offline: {Path(handle.dir).parent}; `wandb sync` that folder uploads it"

    def send(metric: dict[str, Any], step: int) -> None:
        handle.log(hf_log_names(metric), step=step)

    return send, handle.finish, where


def _mlflow(folder: Path, run: str, config: dict[str, Any]) -> Sink:
    import mlflow

    if not os.environ.get("MLFLOW_TRACKING_URI"):
        # A file store in the job folder: no server, no database package (mlflow-skinny has
        # no SQLAlchemy). MLflow 3 keeps it in maintenance mode, refused unless allowed.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        mlflow.set_tracking_uri((folder / "mlruns").resolve().as_uri())
    mlflow.set_experiment(os.environ.get("MLFLOW_EXPERIMENT_NAME", "veri-tui"))
    active = mlflow.start_run(run_name=run)
    mlflow.log_params({k: str(v)[:500] for k, v in config.items()})

    def log(metric: dict[str, Any], step: int) -> None:
        named = {k.replace("train/", "", 1): v for k, v in hf_log_names(metric).items()}
        mlflow.log_metrics({k.replace("eval/", "eval_", 1): v for k, v in named.items()},
                           step=step, run_id=active.info.run_id)  # fmt: skip

    return log, mlflow.end_run, mlflow.get_tracking_uri()


OPEN: dict[str, Callable[[Path, str, dict[str, Any]], Sink]] = {
    "tensorboard": _tensorboard, "trackio": _trackio, "wandb": _wandb, "mlflow": _mlflow,
}  # fmt: skip


class Tracking:
    """Rank 0 writes each metric line to the log and metrics.jsonl and to its trackers;
    other ranks only take part in the collectives that made the line."""

    def __init__(self, cfg: Any, log: RankLog, rank: int) -> None:
        self.log = log
        self.sinks: dict[str, Sink] = {}
        log.closers.append(self.close)  # at the end of the run, a stop or a failure
        if rank != 0:
            return
        job_dir: Path = cfg.job_dir
        for name in trackers_of(cfg.report_to):
            try:
                self.sinks[name] = OPEN[name](job_dir / "tracking", job_dir.name, run_config(cfg))
            except ImportError as exc:
                if exc.name and exc.name.split(".")[0] == MODULES[name]:
                    raise ConfigError(f"report_to: {missing_message(name, 'here')}") from None
                raise
            except Exception as exc:  # noqa: BLE001 - not logged in, no server: one line
                first = (str(exc).strip().splitlines() or [""])[0]
                raise ConfigError(f"report_to: {name} could not start ({type(exc).__name__}: "
                                  f"{first})") from None  # fmt: skip
            log.info(f"report_to: {name} ({self.sinks[name][2]})")

    def write(self, metric: dict[str, Any]) -> None:
        """One metric line: log.txt and metrics.jsonl (rank 0), then each tracker."""
        self.log.metric(metric)
        for name, (send, close, _) in list(self.sinks.items()):
            try:
                send(metric, int(metric["step"]))
            except Exception as exc:  # noqa: BLE001 - a tracker's failure must not end the run
                self.log.info(f"report_to: {name} failed ({type(exc).__name__}: {exc}); "
                              "it gets no more lines, metrics.jsonl keeps them")  # fmt: skip
                del self.sinks[name]
                with contextlib.suppress(Exception):
                    close()

    def close(self) -> None:
        """Flush and close every tracker (the end of the run, or a stop)."""
        for close in [c for _, c, _ in self.sinks.values()]:
            with contextlib.suppress(Exception):  # a closing tracker must not fail the job
                close()
        self.sinks.clear()
