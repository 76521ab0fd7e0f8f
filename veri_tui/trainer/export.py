"""The torch side of `veri-tui export`: `python -m veri_tui.trainer.export merge|smoke ...`.

The launcher (veri_tui/commands/export.py) imports no torch or transformers (a machine with
only the planner installed can run it); it runs this module with its own interpreter:

    python -m veri_tui.trainer.export merge BASE ADAPTER OUT
    python -m veri_tui.trainer.export smoke BASE TUNED OUT_JSON [--adapter] [--datasets JSON]

`merge` writes base + LoRA adapter into OUT (veri_tui/trainer/merge.py); `smoke` answers a few of
the job's prompts with the base and the tuned model (veri_tui/trainer/smoke.py), prints them and
writes them to OUT_JSON. A refusal is one `error: export: ...` line on stderr, exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.source import sources_of
from veri_tui.trainer.merge import MergeError, merge_lora


def _smoke(args: argparse.Namespace) -> None:
    from transformers import AutoTokenizer

    from veri_tui.trainer.smoke import prompts, smoke

    sources = sources_of(json.loads(args.datasets)) if args.datasets else []
    texts = prompts(sources, AutoTokenizer.from_pretrained(args.tuned)) if sources else []
    results = smoke(args.base, args.tuned, args.adapter, texts) if texts else []
    for r in results:
        print(f"smoke: {r['prompt']!r}\n  base:  {r['base']!r}\n  tuned: {r['tuned']!r}")
    if not results:
        print("smoke: skipped (the job's data is not on this machine)")
    args.out.write_text(json.dumps(results, indent=1) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run one step of an export; 0, or 2 after one error line."""
    p = argparse.ArgumentParser(prog="python -m veri_tui.trainer.export")
    sub = p.add_subparsers(dest="step", required=True)
    m = sub.add_parser("merge", help="base + LoRA adapter -> a full checkpoint")
    for name in ("base", "adapter", "out"):
        m.add_argument(name, type=Path)
    s = sub.add_parser("smoke", help="base beside tuned on a few of the job's prompts")
    for name in ("base", "tuned", "out"):
        s.add_argument(name, type=Path)
    s.add_argument("--adapter", action="store_true", help="TUNED is a peft adapter over BASE")
    s.add_argument("--datasets", help="the job's datasets, as job.json spec.datasets (JSON)")
    args = p.parse_args(argv)
    try:
        if args.step == "merge":
            merge_lora(args.base, args.adapter, args.out)
        else:
            _smoke(args)
    except (MergeError, DataError, ValueError) as exc:
        print(f"error: export: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
