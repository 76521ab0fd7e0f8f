"""What each `veri-tui` subcommand accepts: its argparse options, and the command table
(name, one-line help, options) that veri_tui/cli.py builds the parser from.

Parsing only: each command's work is `veri_tui.commands.<name>`. `plan` and `launch` share
the job options (contracts section 5; veri_tui/commands/common.py turns them into a
JobConfig).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _set_option(p: argparse.ArgumentParser, help_text: str) -> None:
    p.add_argument(
        "--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help=help_text
    )


def _job_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `plan` and `launch`: the job fields of contracts section 5."""
    p.add_argument("config", nargs="?", help="a veri.toml (job keys on top, knobs under [method])")
    p.add_argument("--model", help="local checkpoint directory or Hugging Face Hub id")
    p.add_argument("--method", help="sft_text or dpo")
    p.add_argument("--gpu", metavar="NAME", help="GPU type, e.g. L4-24GB, H100-80GB")
    p.add_argument("--gpu-count", type=int, metavar="N", help="GPUs (processes) to use")
    p.add_argument(
        "--dataset", action="append", metavar="SOURCE",
        help="JSONL/JSON/parquet/CSV file, save_to_disk folder or Hub id (org/name), with "
        "options PATH,config=C,split=S,weight=W,prompt=COLUMN; repeat to mix datasets",
    )  # fmt: skip
    p.add_argument("--eval-dataset", metavar="SOURCE", help="eval_loss rows (same forms)")
    p.add_argument("--output", help="output directory for the final artifact")
    _set_option(p, "override a hyperparameter (repeatable), e.g. --set lora_rank=16")
    from veri_tui.launch.backends import add_cli_options

    add_cli_options(p, grouped=False)  # the direct backend's --host
    p.add_argument(
        "--trust-host",
        action="append",
        metavar="FINGERPRINT",
        help="accept an unknown SSH host key with this SHA256 fingerprint and record it "
        "(repeatable: one per unknown host)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_cli_options(p, grouped=True)  # --slurm, --partition, ...: each backend's group


def _plan_options(p: argparse.ArgumentParser) -> None:
    _job_options(p)
    p.add_argument(
        "--trace", action="store_true",
        help="also run the bundled trainer's own step at the job's real shapes on fake CUDA "
        "devices (no GPU, no compiler; needs the [train] extra with torch 2.13.0 and the model "
        "folder here, header-only safetensors suffice): its allocated peak per GPU beside the "
        "plan's, and per phase the peak, aten ops, FLOPs and bytes moved (docs/trace.md)",
    )  # fmt: skip


def _launch_options(p: argparse.ArgumentParser) -> None:
    _job_options(p)
    p.add_argument("--wait", action="store_true", help="follow the rank-0 log to the end")
    p.add_argument(
        "--dry-run", action="store_true",
        help="with --slurm: print the batch script it would submit; submit and create nothing",
    )  # fmt: skip
    p.add_argument(
        "--no-probe", action="store_true",
        help="skip the bandwidth and GPU health probe of the nodes (several hosts; a Slurm "
        "job's allocation, before training) or of the GPUs (2 or more of one machine) "
        "(docs/probe.md)",
    )  # fmt: skip
    p.add_argument(
        "--allow-slow-nodes", action="store_true",
        help="launch (a Slurm job: train) although the probe finds a node slow or sick "
        "(at your own risk)",
    )  # fmt: skip
    from veri_tui.commands.common import canary_options

    canary_options(p)


def _jobs_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "job", nargs="?", help="one job: its record, and what it measured against its plan"
    )
    p.add_argument("--json", action="store_true", help="print JSON records")


def _logs_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="job id")
    p.add_argument("-f", "--follow", action="store_true", help="follow until the job ends")
    p.add_argument(
        "--json", action="store_true",
        help="print the log as written: each step's metrics as the trainer's raw JSON line "
        "(default: one readable row per step, as the app shows them)",
    )  # fmt: skip


def _cancel_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="job id")


def _export_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="job id (a succeeded job whose folder is on this machine)")
    p.add_argument(
        "--merge", action="store_true",
        help="LoRA: merge the adapter into the base, one tensor at a time, and write a full "
        "Hugging Face checkpoint (a full fine-tune has nothing to merge)",
    )  # fmt: skip
    p.add_argument("--push-to-hub", metavar="REPO", help="upload the export to this Hub "
                   "model repo (owner/name, private if new); needs a token")  # fmt: skip
    p.add_argument("--output", metavar="DIR", help="where to write it (default: JOB_DIR/export)")
    p.add_argument("--base", metavar="DIR", help="the base model's folder on this machine "
                   "(default: the job's model_path)")  # fmt: skip


def _calibrate_options(p: argparse.ArgumentParser) -> None:
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--show", action="store_true", help="print each GPU@host entry and its runs (default)"
    )
    what.add_argument(
        "--reset", action="store_true", help="forget every factor; plans go uncalibrated"
    )
    p.add_argument("--json", action="store_true", help="print the calibration file's JSON")


def _resume_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", help="id of a failed or cancelled job")
    p.add_argument("--gpu-count", type=int, metavar="N", help="re-plan for N GPUs (same batch)")
    p.add_argument(
        "--nodes",
        type=int,
        metavar="N",
        help="a Slurm job: re-plan for N nodes (same ranks per node unless --gpu-count; the "
        "global checkpoint in the shared folder is resharded)",
    )
    _set_option(p, "change a hyperparameter and re-plan (repeatable)")
    p.add_argument("--wait", action="store_true", help="follow the new attempt to the end")
    p.add_argument("--json", action="store_true", help="print one JSON job record")


def _probe_options(p: argparse.ArgumentParser) -> None:
    from veri_tui.launch.backends import add_probe_options

    add_probe_options(p)  # --host, --slurm, ...: each backend's nodes
    p.add_argument("--trust-host", metavar="FINGERPRINT",
                   help="accept an unknown SSH host key with this SHA256 fingerprint")  # fmt: skip
    p.add_argument(
        "--ranks-per-node", type=int, metavar="G",
        help="processes a node (default: its GPUs; CPU: 1 a node, 2 on one machine)",
    )  # fmt: skip
    p.add_argument("--sizes", metavar="BYTES,...", help="buffer sizes (default: by device)")
    p.add_argument("--allow-slow-nodes", action="store_true",
                   help="exit 0 even when a node is slow or sick")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")


def _serve_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1); one other machines can reach "
        "needs --allow-remote and $VERI_SERVE_TOKEN",
    )
    p.add_argument(
        "--port", type=int, default=8710, metavar="N", help="TCP port (default 8710; 0: a free one)"
    )
    p.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a non-loopback --host (plain HTTP; the token comes from $VERI_SERVE_TOKEN)",
    )
    p.add_argument(
        "--allow-short-token",
        action="store_true",
        help="accept a $VERI_SERVE_TOKEN shorter than 24 characters (loopback only)",
    )


COMMANDS: dict[str, tuple[str, Callable[[argparse.ArgumentParser], None]]] = {
    "plan": ("print the plan header and plan line", _plan_options),
    "launch": ("validate, plan and start a job; prints the job id", _launch_options),
    "jobs": ("list local and remote jobs", _jobs_options),
    "logs": ("print a job's rank-0 log", _logs_options),
    "cancel": ("cancel a running job (every rank)", _cancel_options),
    "calibrate": (
        "show or reset the throughput/activation factors learnt from finished runs",
        _calibrate_options,
    ),
    "resume": (
        "new attempt of a failed/cancelled job from its newest verified checkpoint",
        _resume_options,
    ),
    "probe": (
        "measure collective bus bandwidth and GPU health of the nodes; plans use the network",
        _probe_options,
    ),
    "export": (
        "a succeeded job's artifact as a model folder: adapter, or --merge into the base; "
        "smoke generation, model card, --push-to-hub",
        _export_options,
    ),
    "serve": (
        "serve the app to a browser (each tab its own app; a token printed once)",
        _serve_options,
    ),
}
