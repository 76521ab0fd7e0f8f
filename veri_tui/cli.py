"""The `veri-tui` command line: the app by default; plan, launch, jobs, logs, cancel, resume,
export, serve, probe.

Parsing lives here (each subcommand's options in veri_tui/commands/options.py); each
subcommand's work lives in `veri_tui.commands.<name>`, imported lazily so that `veri-tui
plan` never pays for Textual (and nothing here imports torch).
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

from veri_tui.commands.options import COMMANDS
from veri_tui.errors import VeriError


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
