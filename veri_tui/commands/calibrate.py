"""`veri-tui calibrate [--show | --reset] [--json]`: the factors later plans are corrected by.

Finished jobs are folded into $VERI_HOME/calibration.json when the launch side reads them
(veri_tui/launch/calibrate.py); plans on the same GPU type and host then use the factors and
say so (`throughput: ... (calibrated from 3 runs on H100-80GB)`); a canary's run lists every
term it measured against the plan's, and the overhead it measured replaces the plan's.
`--show` (the default) folds the local jobs first, then prints every entry; `--reset`
forgets every factor.
A file that cannot be parsed is reported in one warning line, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from veri_tui.launch import calibrate
from veri_tui.plan.calibration import calibration_path, ignored_warning, read_calibration


def run(args: argparse.Namespace) -> int:
    """Show or reset the calibration; exit status 0."""
    path = calibration_path()
    if args.reset:
        had = calibrate.reset()
        print(f"calibration reset: {path}" if had else f"no calibration yet ({path})")
        return 0
    _fold_known_jobs()
    data, why = read_calibration(path)
    if why is not None:
        print(f"warning: {ignored_warning(path, why)}", file=sys.stderr)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    print("\n".join(show_lines(data, str(path))))
    return 0


def _fold_known_jobs() -> None:
    """Fold the local jobs that completed since they were last read. Remote ones fold when
    `veri-tui jobs` (or the app) reads them: showing the calibration connects to no host."""
    from veri_tui.launch import jobs

    try:
        calibrate.fold_jobs(jobs.local_jobs())
    except OSError:
        pass


def _factor(entry: dict[str, Any], name: str) -> str:
    value = entry.get(name)
    runs = sum(1 for r in entry.get("runs") or [] if f"{name}_ratio" in r)
    return f"{value:.2f} ({runs} run{'s' if runs != 1 else ''})" if value else "-"


def show_lines(data: dict[str, Any], where: str) -> list[str]:
    """Every GPU@host entry with its factors, then its runs (job id and clipped ratios)."""
    entries = data.get("entries") or {}
    if not entries:
        return [f"no calibration yet ({where}): it fills as launched jobs complete"]
    out = [f"calibration: {where}"]
    for key, entry in sorted(entries.items()):
        overhead = entry.get("overhead_bytes")
        more = f", overhead {overhead / 1e9:.3g} GB (canaries)" if overhead is not None else ""
        out.append(
            f"{key}: efficiency {_factor(entry, 'efficiency')}, "
            f"activations {_factor(entry, 'activation')}{more}"
        )
        for run in entry.get("runs") or []:
            eff, act = run.get("efficiency_ratio"), run.get("activation_ratio")
            out.append(
                f"  {run.get('job_id')}: tokens/s x{eff if eff is not None else '-'}, "
                f"activations x{act if act is not None else '-'}" + _terms(run)
            )
    return out


def _terms(run: dict[str, Any]) -> str:
    """A canary run's measured/planned ratio of each term it measured beside the plan's."""
    ratios = [f"{name} x{t['measured'] / t['planned']:.3g}"
              for name, t in (run.get("terms") or {}).items()
              if t.get("planned") and t.get("measured") is not None]  # fmt: skip
    return f"; {', '.join(ratios)}" if ratios else ""
