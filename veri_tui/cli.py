"""The `veri-tui` command line: the app by default; plan, launch, jobs, logs, cancel, resume,
export, serve, probe.

Parsing lives here; each subcommand's work lives in `veri_tui.commands.<name>`, imported
lazily so that `veri-tui plan` never pays for Textual (and nothing here imports torch).
User errors (`VeriError`) become one `error: <key>: <message>` line each and exit status 2.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from veri_tui.errors import VeriError


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
    p.add_argument(
        "--host", action="append", metavar="SSH_HOST",
        help="~/.ssh/config alias or user@host[:port]; repeat for several nodes (node 0 first); "
        "none: this machine",
    )  # fmt: skip
    p.add_argument("--trust-host", metavar="FINGERPRINT",
                   help="accept an unknown SSH host key with this SHA256 fingerprint")  # fmt: skip
    p.add_argument(
        "--slurm", action="store_true",
        help="the nodes of this Slurm allocation ($SLURM_JOB_ID), else of one srun allocates",
    )  # fmt: skip
    p.add_argument("--partition", metavar="P", help="with --slurm outside an allocation")
    p.add_argument("--nodes", type=int, metavar="N", help="with --slurm: nodes (default: all)")
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
    "plan": ("print the plan header and plan line", _job_options),
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


def _columns() -> int:
    """The terminal width as shutil.get_terminal_size gives it (COLUMNS, the tty, else 80)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, sized without importing shutil: argparse makes one for every
    option it adds, and shutil brings bz2, lzma and zlib (~1.5 ms of `veri-tui plan`)."""

    def __init__(self, prog: str, **kwargs: Any) -> None:
        kwargs.setdefault("width", _columns() - 2)  # what argparse takes off shutil's width
        super().__init__(prog, **kwargs)


class _KnobsHelpFormatter(_HelpFormatter, argparse.RawDescriptionHelpFormatter):
    """`plan --help`: the options as usual, then the knob list as written."""


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole command tree; kept in one place so --help stays true to the code.

    Given the arguments about to be parsed and a command as the first of them, only that
    command's parser is built: argparse spends ~1 ms on the others, a fifth of what
    `veri-tui plan` itself adds to pydantic's start-up. Anything else (no command, a
    top-level option first, an unknown command) gets the whole tree.
    """
    parser = argparse.ArgumentParser(
        prog="veri-tui",
        description="Plan, launch and watch multi-GPU fine-tuning. "
        "Without a command, opens the app on the bundled tiny model (or --model's).",
        formatter_class=_HelpFormatter,
    )
    # Its own dest: the commands' --model (a job field) sets `model`, and a subparser's
    # default would overwrite this one's value.
    parser.add_argument(
        "--model", dest="app_model", metavar="MODEL",
        help="open the app on this model: a local checkpoint directory or Hub id",
    )  # fmt: skip
    sub = parser.add_subparsers(dest="command")
    first = argv[0] if argv else None
    for name, (help_text, add_options) in COMMANDS.items():
        if first in COMMANDS and first != name:
            continue
        extra: dict[str, Any] = {"formatter_class": _HelpFormatter}
        if name in ("plan", "launch") and {"-h", "--help"} & set(argv or ()):
            from veri_tui.commands.knob_help import epilog

            # The knob list is laid out already: argparse must not re-wrap it.
            extra = {"formatter_class": _KnobsHelpFormatter, "epilog": epilog(_columns() - 2)}
        add_options(sub.add_parser(name, help=help_text, **extra))
    return parser


# Write errors on our own output that are the machine's, not ours: one line, no traceback.
_OUTPUT_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EIO)


def dispatch(args: argparse.Namespace) -> int:
    """Run the parsed command; user errors become one line each and exit status 2."""
    try:
        if args.command is None:
            from veri_tui.app import run_app

            return run_app(model=args.app_model)
        if getattr(args, "app_model", None):
            raise VeriError(
                f"before a command it opens the app; write `veri-tui {args.command} "
                f"--model {args.app_model}`",
                key="--model",
            )
        # Each command's module is imported only when it runs (`plan` stays light).
        name = "jobs" if args.command in ("logs", "cancel") else args.command  # jobs.py's
        command = importlib.import_module(f"veri_tui.commands.{name}")
        run: Callable[[argparse.Namespace], int] = command.run
        return run(args)
    except VeriError as exc:
        for line in exc.lines():
            print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `veri-tui plan | head` closed the pipe: not an error worth a traceback. Point
        # stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        if exc.filename is not None or exc.errno not in _OUTPUT_FULL:
            raise
        # stdout on a full disk (`veri-tui plan > /dev/full`): one line, and the unwritten
        # rest goes to /dev/null so the final flush does not raise again.
        print(f"error: output: {exc.strerror}", file=sys.stderr)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The parsed command line (`sys.argv[1:]` when None); argparse exits on --help or misuse."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    if isinstance(getattr(args, "trust_host", None), list):
        args.trust_host = " ".join(args.trust_host)  # every layer takes them as one string
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI, in-process; returns the exit status.

    Pure for the process: it leaves the garbage collector and os.environ as it found them
    and returns (argparse still raises SystemExit for --help or a bad option). The
    start-up and exit trims of the `veri-tui` process belong to veri_tui.entry, which calls
    parse_args and dispatch itself.
    """
    return dispatch(parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
