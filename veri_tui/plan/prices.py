"""Price of one GPU-hour per GPU type: published on-demand list prices, or the user's own.

Order: the `price_per_gpu_hour` knob, then `$VERI_HOME/prices.toml` (`[prices]` table, GPU
name = USD per GPU-hour), then the list price below. A prices file that cannot be used is
one warning naming it (the plan goes on with the list prices), never a traceback. The list
prices are per GPU in an 8-GPU (4 for L4/A10G) on-demand instance, with their provider and
the date they were read: docs/planning.md, Cost, has the sources.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

from veri_tui.jobfolder.contract.layout import veri_home


class ListPrice(NamedTuple):
    """One published on-demand price, per GPU-hour in USD."""

    usd: float
    source: str  # provider, instance and list price it is divided from
    date: str  # when it was read (ISO date)


# Sources (docs/planning.md, Cost): AWS from the InferSave paper's Table I (AWS on-demand,
# N. Virginia, as listed 2025-02-04); Lambda and Nebius from SkyPilot's catalog of their
# on-demand lists (skypilot-org/skypilot-catalog, catalogs/v7/<provider>/vms.csv), read on
# the date given. Each is the instance's hourly price divided by its GPUs.
LIST_PRICES: dict[str, ListPrice] = {
    "L4-24GB": ListPrice(1.15, "AWS g6.12xlarge, 4 x L4, $4.602/h", "2025-02-04"),
    "A10G-24GB": ListPrice(1.42, "AWS g5.12xlarge, 4 x A10G, $5.672/h", "2025-02-04"),
    "A100-40GB": ListPrice(1.29, "Lambda gpu_8x_a100, 8 x A100 40GB, $10.32/h", "2026-12-01"),
    "A100-80GB": ListPrice(1.79, "Lambda gpu_8x_a100_80gb_sxm4, $14.32/h", "2026-12-01"),
    "H100-80GB": ListPrice(2.99, "Lambda gpu_8x_h100_sxm5, $23.92/h", "2026-12-01"),
    "H200-141GB": ListPrice(3.50, "Nebius gpu-h200-sxm, 8 x H200, $28.00/h", "2026-12-01"),
    "B200-180GB": ListPrice(5.50, "Nebius gpu-b200-sxm, 8 x B200, $44.00/h", "2026-12-01"),
}


def prices_file() -> Path:
    """`$VERI_HOME/prices.toml` (VERI_HOME defaults to ~/.veri)."""
    return veri_home() / "prices.toml"


def _valid(value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0


def read_prices_file(path: Path | None = None) -> tuple[dict[str, float], str | None]:
    """The `[prices]` table of the prices file ({} when there is none) and a warning line
    naming the file when it cannot be used (then nothing of it is used)."""
    path = prices_file() if path is None else path
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{path}: cannot read the prices file ({exc.strerror}); using list prices"
    import tomllib  # only when the user has a prices file

    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        return {}, f"{path}: not valid TOML ({exc}); using list prices"
    table = data.get("prices")
    if not isinstance(table, dict):
        return (
            {},
            f'{path}: no [prices] table (e.g. [prices] "H100-80GB" = 2.99); using list prices',
        )
    bad = [name for name, value in table.items() if not _valid(value)]
    if bad:
        return {}, f"{path}: {bad[0]}: a price must be a positive number of USD per GPU-hour"
    return {name.lower(): float(value) for name, value in table.items()}, None


def price_per_gpu_hour(
    gpu: str, knob: float | None = None, path: Path | None = None
) -> tuple[float | None, str, str | None]:
    """(USD per GPU-hour or None, where it comes from, a warning about the prices file)."""
    if knob is not None:
        return float(knob), "price_per_gpu_hour", None
    table, warning = read_prices_file(path)
    source_file = prices_file() if path is None else path
    if gpu.lower() in table:
        return table[gpu.lower()], str(source_file), warning
    listed = LIST_PRICES.get(gpu)
    if listed is not None:
        return listed.usd, f"list price ({listed.source}; {listed.date})", warning
    return None, f"no list price for {gpu}; set price_per_gpu_hour or {source_file}", warning
