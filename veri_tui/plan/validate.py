"""Validation at submit: the seed's refusal list (contracts section 2), all found at once.

Each refusal names its key and the way out. Nothing here reads the model: these are the
checks a service makes before any GPU is billed.
"""

from __future__ import annotations

from veri_tui.errors import Refusal, VeriError
from veri_tui.jobfolder.knobs import Hyperparameters, by_name, table
from veri_tui.plan.gpus import get_gpu, gpus_text
from veri_tui.plan.knobs import METHODS, METHODS_OTHER, MULTI_GPU_KEYS, JobConfig

#: The knobs whose feature is not available: only their default runs (knobs/fields.py).
UNAVAILABLE = tuple(k for k in table(Hyperparameters) if k.unavailable)
#: The knobs that run only some of their values (their `available`: precision, zero_stage,
#: network), as the schema declares them.
KNOBS = by_name(Hyperparameters)


def _method_errors(job: JobConfig) -> list[Refusal]:
    if job.method in METHODS_OTHER:
        hp = job.hyperparameters
        multi = [k for k in MULTI_GPU_KEYS if k in hp.fields_given]
        if job.gpu_count > 1:
            multi.insert(0, "gpu_count")
        if multi:
            msg = (
                f"{job.method} runs its own layout: the multi-GPU keys "
                f"({', '.join(multi)}) are not accepted; remove them or use sft_text / dpo"
            )
        else:
            msg = f"{job.method} is not supported by the bundled trainer; use sft_text or dpo"
        return [Refusal("method", msg)]
    if job.method not in METHODS:
        import difflib  # only on errors: keeps `veri-tui plan` startup lean

        close = difflib.get_close_matches(job.method, METHODS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        return [Refusal("method", f"unknown method {job.method!r}; {hint}use sft_text or dpo")]
    return []


def _parallel_errors(job: JobConfig) -> list[Refusal]:
    hp = job.hyperparameters
    n = job.gpu_count
    errs: list[Refusal] = []
    if n < 1:
        return [Refusal("gpu_count", f"must be at least 1 (got {n})")]
    dp = hp.data_parallel_size
    if dp is not None and dp != n:
        # tp, cp and pp always run at 1 here (other values are refused below), so the
        # product the launcher checks is dp alone.
        errs.append(
            Refusal(
                "data_parallel_size",
                f"TP*CP*DP*PP={dp} != WORLD_SIZE={n}; "
                f"set data_parallel_size to {n} (= gpu_count) or leave it unset",
            )
        )
    for knob in UNAVAILABLE:  # the schema's knobs that run at their default only
        value = getattr(hp, knob.name)
        if value != knob.default:
            errs.append(Refusal(knob.name, f"{knob.unavailable} is not available (got {value}); "
                                           f"set it to {knob.default}"))  # fmt: skip
    z = hp.zero_stage
    if z == 1:
        errs.append(
            Refusal(
                "zero_stage",
                "ZeRO-1 is not available; use zero_stage 2, which costs no extra communication",
            )
        )
    elif z not in KNOBS["zero_stage"].available:
        errs.append(Refusal("zero_stage", KNOBS["zero_stage"].offered(z)))
    if hp.cpu_offload and z == 0:
        errs.append(
            Refusal("cpu_offload", "needs sharding: set zero_stage 3 (or auto), or drop it")
        )
    if n == 1:
        if z in (2, 3):
            errs.append(
                Refusal("zero_stage", f"zero_stage {z} shards across GPUs: needs gpu_count > 1")
            )
        if hp.cpu_offload:
            errs.append(Refusal("cpu_offload", "a sharding knob: needs gpu_count > 1"))
    else:
        for key in ("use_unsloth", "load_in_4bit", "use_liger"):
            if getattr(hp, key):
                errs.append(Refusal(key, "single GPU only: set it to false or gpu_count 1"))
    return errs


def _batch_errors(job: JobConfig) -> list[Refusal]:
    hp = job.hyperparameters
    n = max(job.gpu_count, 1)
    mbs, ga, gbs = hp.micro_batch_size, hp.gradient_accumulation_steps, hp.global_batch_size
    if gbs is None:
        return []
    if ga is not None:
        want = mbs * ga * n
        if gbs != want:
            return [
                Refusal(
                    "global_batch_size",
                    f"{gbs} != micro_batch_size x gradient_accumulation_steps x gpu_count "
                    f"= {mbs} x {ga} x {n} = {want}; set it to {want} or drop one of them",
                )
            ]
    elif gbs % (mbs * n):
        lo = max(mbs * n, gbs // (mbs * n) * mbs * n)
        return [
            Refusal(
                "global_batch_size",
                f"{gbs} is not a multiple of micro_batch_size x gpu_count = {mbs} x {n}; "
                f"use {lo} or {lo + mbs * n}",
            )
        ]
    return []


def _memory_knob_errors(job: JobConfig) -> list[Refusal]:
    """activation_checkpointing against its alias; QLoRA needs adapters to train; packing
    is for sft_text."""
    hp, errs = job.hyperparameters, []
    mode = hp.activation_checkpointing
    if mode is not None and "gradient_checkpointing" in hp.fields_given:
        # on is any checkpointing (full unless activation_checkpointing says selective).
        if hp.gradient_checkpointing != (mode != "none"):
            gc = str(hp.gradient_checkpointing).lower()
            errs.append(Refusal("activation_checkpointing", f"{mode!r} contradicts "
                                f"gradient_checkpointing={gc} (its alias: on = full, off = "
                                "none); drop one of them"))  # fmt: skip
    if hp.load_in_4bit and not hp.lora_rank:
        errs.append(Refusal("load_in_4bit", "QLoRA trains LoRA adapters over the 4-bit base: "
                            "set lora_rank (e.g. 16) or drop load_in_4bit"))  # fmt: skip
    if hp.packing and job.method != "sft_text":
        errs.append(Refusal("packing", f"packing applies to sft_text, not {job.method} (a dpo "
                            "pair is one forward of its own); drop packing"))  # fmt: skip
    return errs


#: Default inter-node bandwidth per node, Gb/s, by network type (docs/planning.md): one for
#: each of the `network` knob's available values.
NETWORK_GBPS: dict[str, float] = dict(zip(KNOBS["network"].available, (25.0, 400.0), strict=True))


def _node_errors(job: JobConfig) -> list[Refusal]:
    """A multi-node job: distinct hosts, a gpu_count that splits evenly over them (unequal
    nodes found by the preflight are refused there), a known network type."""
    errs: list[Refusal] = []
    hosts = job.hosts or []
    if any(not isinstance(h, str) or not h.strip() for h in hosts):
        errs.append(Refusal("hosts", "an empty host name; list ~/.ssh/config aliases or "
                                     "user@host[:port]"))  # fmt: skip
    twice = sorted({h for h in hosts if hosts.count(h) > 1})
    if twice:
        errs.append(Refusal("hosts", f"{', '.join(twice)} listed twice; one node per host"))
    nodes = job.nodes
    # Unset, gpu_count is detected at the preflight (nodes x GPUs per node).
    if nodes > 1 and "gpu_count" in job.fields_given and job.gpu_count % nodes:
        lo = max(nodes, job.gpu_count // nodes * nodes)
        errs.append(
            Refusal("gpu_count", f"{gpus_text(job.gpu_count)} cannot split over {nodes} nodes "
                    f"(every node runs the same number of ranks); use {lo} or {lo + nodes}")
        )  # fmt: skip
    if job.rdzv_endpoint is not None:
        addr, _, port = job.rdzv_endpoint.rpartition(":") if ":" in job.rdzv_endpoint else (
            job.rdzv_endpoint, "", "")  # fmt: skip
        if not addr.strip() or (port and not (port.isdigit() and 0 < int(port) < 65536)):
            errs.append(Refusal("rdzv_endpoint", f"{job.rdzv_endpoint!r} is not "
                                "address[:port]; e.g. 10.0.0.5 or 10.0.0.5:29400"))  # fmt: skip
    net = job.hyperparameters.network
    if net not in NETWORK_GBPS:
        way_out = f"{KNOBS['network'].offered(net)} (or set internode_bandwidth_gbps)"
        errs.append(Refusal("network", way_out))
    return errs


# Keys each refusal (by its Refusal.key) reads besides its own. When some keys of a job
# could not be parsed, a refusal is only reported if none of these failed: otherwise a
# default standing in for the unparsed value could make it up (gpu_count "x" read as 1 would
# refuse zero_stage 3 "on one GPU").
RULE_INPUTS: dict[str, frozenset[str]] = {
    "method": frozenset(("gpu_count", *MULTI_GPU_KEYS)),
    "data_parallel_size": frozenset({"gpu_count"}),
    "zero_stage": frozenset({"gpu_count"}),
    "cpu_offload": frozenset({"zero_stage", "gpu_count"}),
    "global_batch_size": frozenset(
        {"micro_batch_size", "gradient_accumulation_steps", "gpu_count"}
    ),
    "use_unsloth": frozenset({"gpu_count"}),
    "load_in_4bit": frozenset({"gpu_count", "lora_rank"}),
    "activation_checkpointing": frozenset({"gradient_checkpointing"}),
    "packing": frozenset({"method"}),
    "use_liger": frozenset({"gpu_count"}),
    "gpu_count": frozenset({"hosts"}),
}


# Refusals that a larger layout (more GPUs per node) could lift.
EXACT_COUNT_KEYS = frozenset({"gpu_count", "data_parallel_size", "global_batch_size"})


def validate_parsed(job: JobConfig, failed: set[str]) -> list[Refusal]:
    """The refusals of `job` (built from the keys that parsed) that hold whatever values the
    `failed` keys turn out to have: reported beside the parse errors, so that every refusal
    shows at once."""
    return [
        e
        for e in validate(job)
        if e.key not in failed and not RULE_INPUTS.get(e.key, frozenset()) & failed
    ]


def validate(job: JobConfig) -> list[Refusal]:
    """Every submit refusal for this job (empty list: accepted).

    A multi-node job without a gpu_count has its layout detected at the preflight (nodes x
    GPUs per node): before that it is checked as its smallest layout, one GPU per node
    (`--host n0 --host n1 --set zero_stage=3` is not "one GPU"), leaving the rules that
    need the exact count to the plan made with the layout.
    """
    if job.nodes > 1 and "gpu_count" not in job.fields_given:
        smallest = validate(job.copy_with(update={"gpu_count": job.nodes}))
        return [e for e in smallest if e.key not in EXACT_COUNT_KEYS]
    errs = _method_errors(job)
    try:
        get_gpu(job.gpu)
    except VeriError as exc:
        errs.extend(exc.errors)
    errs.extend(_parallel_errors(job))
    errs.extend(_batch_errors(job))
    errs.extend(_node_errors(job))
    errs.extend(_memory_knob_errors(job))
    p = job.hyperparameters.precision
    if p not in KNOBS["precision"].available:
        errs.append(Refusal("precision", KNOBS["precision"].offered(p)))
    return errs
