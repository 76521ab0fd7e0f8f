"""Time and cost of the whole job: tokens -> optimizer steps -> wall time -> GPU-hours -> USD.

steps = max_steps, else num_epochs x floor(rows / global_batch_size) (the trainer drops the last
partial batch: veri_tui/trainer/data.py `global_batch`). A step's time is the throughput model's
(throughput.py) for the tokens the step really has: the trainer pads each micro-batch to its longest
sample (veri_tui/trainer/data.py `collate`), so the sequence length used is the expected longest of
micro_batch_size random rows (for dpo, of the longer of chosen and rejected), each truncated at
max_seq_length / max_length. wall time = steps x step time; GPU-hours = wall time x gpu_count /
3600; price = GPU-hours x price per GPU-hour. Without a tokenizer (a model known from Hub metadata
only, or no `tokenizers` package) the rows still give the steps and every sample is taken at full
length (an upper bound). With `packing`, the rows are the packed rows the trainer makes from the
same lengths (veri_tui/jobfolder/data/packing.py: best-fit decreasing), so steps = packed rows /
global_batch_size and a micro-batch's length is the expected longest of its packed rows; with
eval_fraction the held-out share of the packed rows is taken pro rata (the trainer packs what is
left).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from math import exp, lgamma
from typing import TYPE_CHECKING, Any

from veri_tui.jobfolder.contract.errors import DataError
from veri_tui.jobfolder.data.packing import packed_lengths
from veri_tui.plan.prices import price_per_gpu_hour

if TYPE_CHECKING:
    from veri_tui.plan.tokens import TokenCount

COST_KEYS = ("dataset_tokens", "steps", "wall_time_s", "gpu_hours", "price_per_gpu_hour",
             "price")  # fmt: skip


def expected_max(hist: dict[int, int], k: int) -> float:
    """E[max] of k values drawn without replacement from the multiset `hist` (value ->
    count): a micro-batch is k consecutive rows of a random permutation."""
    n = sum(hist.values())
    k = max(1, min(k, n))

    def below(b: int) -> float:  # P(all k drawn rank <= b) = C(b, k) / C(n, k)
        if b < k:
            return 0.0
        return exp(lgamma(b + 1) - lgamma(b - k + 1) - lgamma(n + 1) + lgamma(n - k + 1))

    total, seen, last = 0.0, 0, 0.0
    for value in sorted(hist):
        seen += hist[value]
        p = below(seen)
        total += value * (p - last)
        last = p
    return total


def truncated(count: TokenCount, max_len: int) -> tuple[int, dict[int, int]]:
    """(tokens fed per epoch, histogram of padded sample lengths) at a truncation length."""
    tokens, padded = 0, dict[int, int]()
    for *lengths, rows in count.lengths:
        cut = [min(x, max_len) for x in lengths]
        tokens += sum(cut) * rows
        longest = max(cut)  # dpo: chosen and rejected share one padded forward
        padded[longest] = padded.get(longest, 0) + rows
    return tokens, padded


@functools.lru_cache(maxsize=8)  # the app re-plans on every keystroke
def _packed(lengths: tuple[tuple[int, ...], ...], max_len: int) -> list[int]:
    """The tokens of each packed row the trainer makes (veri_tui/jobfolder/data/packing.py)."""
    return packed_lengths(((n, rows) for n, rows in lengths), max_len)


def _held_out(rows: int, fraction: float) -> int:
    from veri_tui.jobfolder.data.dataload import eval_split

    return len(eval_split(rows, fraction, 0))  # its size does not depend on the seed


def _unknown(reason: str, **extra: Any) -> dict[str, Any]:
    return {"known": False, **dict.fromkeys(COST_KEYS), **extra, "reason": reason}


def job_tokens(job: Any, model_path: str | None, count: bool = True) -> TokenCount | str | None:
    """The job's token count, or why there is none (a string: the cost then assumes
    full-length samples); None when it is not cached and `count` is False. DataError for
    a dataset that cannot be read or counted. The app calls it in a worker to fill the cache."""
    # Imported with a dataset only: a plan without one never pays for them.
    from veri_tui.plan.dataset_locations import job_sources
    from veri_tui.plan.tokens import cached_count, count_tokens, tokenizer_path

    dataset = job_sources(job)
    tok = tokenizer_path(model_path)
    if tok is None:
        if not model_path:
            return "the model is known from Hub metadata only"
        return f"no tokenizer.json in {model_path}"
    try:
        if count:
            return count_tokens(dataset, tok.parent, job.method)
        return cached_count(dataset, tok.parent, job.method)
    except ImportError:
        return "the tokenizers package is not installed (pip install tokenizers)"
    except OSError as exc:  # a file vanished or became unreadable between stat and read
        raise DataError(f"{exc.filename}: cannot read ({exc.strerror})") from None


def estimate_cost(
    job: Any,
    model_path: str | None,
    gpu: Any,
    global_batch_size: int,
    micro_batch_size: int,
    throughput_at: Callable[[int], dict[str, Any]],
    *,
    count: bool = True,
) -> tuple[dict[str, Any], list[str]]:
    """The cost record for a planned job, and warnings (an unusable prices file).

    `throughput_at(length)` is the plan's throughput estimate at a sample length. With
    `count=False` only cached counts are used (the app counts in a worker): an uncounted
    dataset gives `{"known": False, "pending": True}`."""
    hp = job.hyperparameters
    usd, source, warning = price_per_gpu_hour(gpu.name, hp.price_per_gpu_hour)
    warnings = [warning] if warning else []
    price_info = {"price_per_gpu_hour": usd, "source": source}
    if gpu.bf16_dense_tflops is None:
        return _unknown(f"{gpu.name} has no throughput estimate", **price_info), warnings
    if not job.dataset:
        return _unknown("no dataset given", **price_info), warnings
    max_len = hp.max_length if job.method == "dpo" else hp.max_seq_length
    packing = hp.packing and job.method == "sft_text"
    note = None
    try:
        found = job_tokens(job, model_path, count)
        if found is None:
            return _unknown("counting the dataset's tokens", pending=True, **price_info), warnings
        if isinstance(found, str):
            from veri_tui.plan.dataset_locations import job_sources
            from veri_tui.plan.tokens import count_rows

            rows = count_rows(job_sources(job))
            note, tokens, length, lengths = found, None, float(max_len), None
        else:
            lengths = found.lengths
            rows = found.rows
            tokens, padded = truncated(found, max_len)
            if packing:  # a micro-batch pads to its longest packed row
                padded = dict(Counter(_packed(lengths, max_len)))
            length = expected_max(padded, micro_batch_size)
    except DataError as exc:
        return _unknown(str(exc), data_error=True, **price_info), warnings
    # eval_fraction's rows are held out of training (veri_tui/jobfolder/data/dataload.py
    # eval_split).
    held = _held_out(rows, hp.eval_fraction) if not job.eval_dataset else 0
    if held and tokens is not None:
        tokens = round(tokens * (rows - held) / rows)
    rows -= held
    samples = rows
    if packing:  # the trainer packs its training rows, and the global batch counts them
        packed = _packed(lengths, max_len) if lengths is not None else [max_len] * rows
        rows = round(len(packed) * rows / (rows + held))  # the held-out share, pro rata
    per_epoch = rows // global_batch_size
    if per_epoch == 0:
        why = f"global_batch_size {global_batch_size} is more than the dataset's {rows} rows"
        return _unknown(why, dataset_rows=rows, **price_info), warnings
    steps = hp.max_steps or hp.num_epochs * per_epoch
    tp = throughput_at(max(1, round(length)))
    wall = steps * tp["step_time_s"]
    gpu_hours = wall * job.gpu_count / 3600
    cost = {
        "known": True,
        "dataset_tokens": tokens,
        "steps": steps,
        "wall_time_s": wall,
        "gpu_hours": gpu_hours,
        "price_per_gpu_hour": usd,
        "price": gpu_hours * usd if usd is not None else None,
        "source": source,
        "dataset_rows": rows,
        "eval_rows": held or None,
        "packed_from": samples if packing else None,
        "steps_per_epoch": per_epoch,
        "sample_length": tp["sequence_length"],
        "step_time_s": tp["step_time_s"],
        "optimizer_s": tp.get("optimizer_s"),  # of the step (veri_tui/plan/optimizer_time.py)
        "gpu": gpu.name,
        "gpu_count": job.gpu_count,
    }
    if note:
        cost["note"] = f"full-length samples assumed: {note}"
    return cost, warnings


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:,.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.2g} s"


def gpu_hours_text(x: float) -> str:
    """9.6, 0.015, <0.001: GPU-hours as the cost line shows them."""
    if x >= 0.1:
        return f"{x:,.1f}"
    return f"{x:.2g}" if x >= 0.001 else "<0.001"


def money_text(usd: float) -> str:
    """~$7.70, or <$0.01."""
    return f"~${usd:,.2f}" if usd >= 0.01 else "<$0.01"


def cost_line(cost: dict[str, Any]) -> str:
    """`cost: 2.4 h on 4 x L4-24GB = 9.6 GPU-hours, ~$7.70 at $0.80/GPU-hour`."""
    if not cost:
        return "cost: not estimated"
    if not cost.get("known"):
        if cost.get("pending"):
            return "cost: counting the dataset's tokens..."
        return f"cost: not estimated ({cost.get('reason')})"
    if cost.get("cpu_partition"):  # a Slurm CPU partition: CPU processes, no GPU price
        return (
            f"cost: {_duration(cost['wall_time_s'])} on {cost['gpu_count']} CPU rank(s) of "
            f"partition {cost['cpu_partition']}; no GPU-hour price"
        )
    head = (
        f"cost: {_duration(cost['wall_time_s'])} on {cost['gpu_count']} x {cost['gpu']} = "
        f"{gpu_hours_text(cost['gpu_hours'])} GPU-hours"
    )
    if cost.get("optimizer_s") and cost.get("step_time_s"):  # what the optimizer step costs
        head += f" ({cost['optimizer_s'] / cost['step_time_s']:.0%} in the optimizer step)"
    if cost["price"] is None:
        head += f", price unknown ({cost['source']})"
    else:
        head += f", {money_text(cost['price'])} at ${cost['price_per_gpu_hour']:,.2f}/GPU-hour"
    if cost.get("packed_from"):  # the steps follow the packed rows, not the samples
        head += (f"; packing: {cost['packed_from']:,} samples in {cost['dataset_rows']:,} "
                 f"rows, {cost['steps']:,} steps")  # fmt: skip
    return head + (f" ({cost['note']})" if cost.get("note") else "")
