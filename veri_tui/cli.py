"""The `veri-tui` command line: the app by default, plan/launch/jobs/logs/cancel headless.

Parsing lives here; each subcommand's work lives in `veri_tui.commands.<name>`, imported
lazily so that `veri-tui plan` never pays for Textual (and nothing here imports torch).
User errors (`VeriError`) become one `error: <key>: <message>` line each and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from veri_tui.errors import VeriError


def _job_options(p: argparse.ArgumentParser) -> None:
    """Options shared by `plan` and `launch`: the job fields of contracts section 5."""
    p.add_argument("config", nargs="?", help="a veri.toml (job keys on top, knobs under [method])")
    p.add_argument("--model", help="local checkpoint directory or Hugging Face Hub id")
    p.add_argument("--method", help="sft_text or dpo")
    p.add_argument("--gpu", metavar="NAME", help="GPU type, e.g. L4-24GB, H100-80GB")
    p.add_argument("--gpu-count", type=int, metavar="N", help="GPUs (processes) to use")
    p.add_argument("--dataset", help="JSONL dataset file")
    p.add_argument("--output", help="output directory for the final artifact")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a hyperparameter (repeatable), e.g. --set lora_rank=16",
    )
    p.add_argument("--host", metavar="SSH_HOST", help="~/.ssh/config alias or user@host[:port]")
    p.add_argument(
        "--trust-host",
        metavar="FINGERPRINT",
        help="accept an unknown SSH host key with this SHA256 fingerprint and record it",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")


def build_parser() -> argparse.ArgumentParser:
    """The whole command tree; kept in one place so --help stays true to the code."""
    parser = argparse.ArgumentParser(
        prog="veri-tui",
        description="Plan, launch and watch multi-GPU fine-tuning. "
        "Without a command, opens the app on the bundled tiny model.",
    )
    sub = parser.add_subparsers(dest="command")

    p_plan = sub.add_parser("plan", help="print the plan header and plan line")
    _job_options(p_plan)

    p_launch = sub.add_parser("launch", help="validate, plan and start a job; prints the job id")
    _job_options(p_launch)
    p_launch.add_argument("--wait", action="store_true", help="follow the rank-0 log to the end")

    p_jobs = sub.add_parser("jobs", help="list local and remote jobs")
    p_jobs.add_argument("--json", action="store_true", help="print JSON records")

    p_logs = sub.add_parser("logs", help="print a job's rank-0 log")
    p_logs.add_argument("job", help="job id")
    p_logs.add_argument("-f", "--follow", action="store_true", help="follow until the job ends")

    p_cancel = sub.add_parser("cancel", help="cancel a running job (every rank)")
    p_cancel.add_argument("job", help="job id")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit status."""
    # We use no pydantic plugins; without this, building the first model class scans the
    # entry points of every installed distribution for them (~10 ms of each `veri-tui plan`).
    # setdefault: a value the user set (to enable a plugin of their own) is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    args = build_parser().parse_args(argv)
    try:
        if args.command is None:
            from veri_tui.app import run_app

            return run_app()
        if args.command == "plan":
            from veri_tui.commands import plan as cmd
        elif args.command == "launch":
            from veri_tui.commands import launch as cmd
        else:
            from veri_tui.commands import jobs as cmd
        return cmd.run(args)
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


if __name__ == "__main__":
    raise SystemExit(main())
