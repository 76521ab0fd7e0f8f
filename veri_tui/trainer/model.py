"""Load the model and tokenizer, apply LoRA and gradient checkpointing as planned.

Dtypes follow contracts section 3: precision bf16 keeps bf16 parameters (and bf16 AdamW
states, updated with stochastic rounding: veri_tui/trainer/adamw.py); fp32 keeps fp32 master
parameters. Under LoRA the frozen base is always bf16 and the adapters are fp32 in either
precision: they are tiny, and in bf16 an update below half a bf16 step of a weight is lost.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from veri_tui.jobfolder.contract.errors import ConfigError, ModelLoadError
from veri_tui.jobfolder.knobs.lora_targets import (
    LORA_TARGETS,
    ROUTED_EXPERTS,
    chosen,
    is_moe,
    target_modules,
)
from veri_tui.trainer import checkpointing
from veri_tui.trainer.config import TrainConfig
from veri_tui.trainer.loading import cpu_stand_ins, defer, eager, params_on_meta

if TYPE_CHECKING:
    from transformers import PreTrainedModel

# LoRA adapters train in fp32 in both precisions (4 weight + 4 grad + 8 AdamW bytes/param,
# veri_tui/plan/memory.py ADAPTER_BYTES_PER_PARAM): peft's own default for a bf16 base.
ADAPTER_DTYPE = torch.float32
QLORA_NEEDS_CUDA = (
    "load_in_4bit: QLoRA needs a CUDA GPU (bitsandbytes NF4) and this host has none; "
    "launch on a GPU host (--host) or drop load_in_4bit"
)


def dtype_kwarg(dtype: torch.dtype) -> dict[str, torch.dtype]:
    """`dtype=` for transformers >= 4.56, `torch_dtype=` before (older ones ignore `dtype`)."""
    import transformers

    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    return {"dtype": dtype} if (major, minor) >= (4, 56) else {"torch_dtype": dtype}


def resolve_model_dir(model: str) -> Path:
    """A local directory, or a Hub id already in the local HF cache (never downloads)."""
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    if path.is_absolute() or model.startswith("."):
        raise ModelLoadError(f"model {model}: directory not found")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - any cache miss is the same user-facing problem
        raise ModelLoadError(
            f"model {model}: not a local directory and not in the Hugging Face cache "
            f"({type(exc).__name__}); download it first or pass a directory"
        ) from None


def check_model_files(path: Path) -> None:
    """config.json and every safetensors file the index names must exist."""
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"model {path}: config.json is missing")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError) as exc:
            raise ModelLoadError(f"model {index}: unreadable index ({exc})") from None
        for name in sorted(files):
            if not (path / name).is_file():
                raise ModelLoadError(f"model {path}: {index.name} names {name}, which is missing")
    elif not (path / "model.safetensors").is_file():
        raise ModelLoadError(f"model {path}: no model.safetensors (or sharded index) found")


def load_tokenizer(path: Path) -> Any:
    """AutoTokenizer with a pad token (EOS when the tokenizer has none)."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    # Unannotated in transformers: a no-argument call. Progress bars would fill torchrun.log
    # on every rank.
    cast(Callable[[], None], hf_logging.disable_progress_bar)()

    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - transformers raises many types here
        raise ModelLoadError(f"model {path}: cannot load the tokenizer ({exc})") from None
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def qlora_config() -> Any:
    """The QLoRA base as the plan counts it (veri_tui/plan/memory.py): the linears as
    bitsandbytes NF4 with double quantisation, computing in bf16; embeddings, norms and the
    head stay bf16 (transformers keeps the head unquantized)."""
    from transformers import BitsAndBytesConfig

    # Unannotated in transformers (its keyword arguments are the quantization's settings).
    return cast(Callable[..., Any], BitsAndBytesConfig)(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=torch.bfloat16,
    )


def require_bitsandbytes() -> None:
    """Import bitsandbytes only for a QLoRA job (never at module import); one CONFIG_ERROR
    line when it is missing or broken (a wheel built for another CUDA raises on import)."""
    try:
        import bitsandbytes  # noqa: F401 - transformers quantizes with it
    except ImportError:
        raise ConfigError(
            "load_in_4bit: bitsandbytes is not installed on this host; pip install bitsandbytes"
        ) from None
    except Exception as exc:  # noqa: BLE001 - its CUDA library checks raise many types
        raise ConfigError(
            f"load_in_4bit: bitsandbytes fails to import on this host ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); reinstall it for this CUDA"
        ) from None


def qlora_kwargs(device: torch.device) -> dict[str, Any]:
    """from_pretrained's arguments for a QLoRA base, loaded straight onto this CUDA GPU."""
    if device.type != "cuda":
        raise ConfigError(QLORA_NEEDS_CUDA)
    require_bitsandbytes()
    return {"quantization_config": qlora_config(), "device_map": {"": device.index or 0}}


def load_base(path: Path, dtype: torch.dtype, quantized: dict[str, Any] | None = None) -> nn.Module:
    """The model whole (`from_pretrained`), or on the meta device to be sharded and then filled.

    The meta build (the default; veri_tui/trainer/loading.py) holds nothing until
    `veri_tui.trainer.loading.materialize`; `VERI_LOAD=from_pretrained` (tests only) loads it whole,
    and so does a QLoRA base (`quantized`: qlora_kwargs), which bitsandbytes quantizes as it
    loads, straight onto its GPU.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    check_model_files(path)
    model: PreTrainedModel
    try:
        if eager() or quantized:
            model = AutoModelForCausalLM.from_pretrained(
                path, attn_implementation="sdpa", **dtype_kwarg(dtype), **(quantized or {})
            )
        else:
            config = AutoConfig.from_pretrained(path)
            with params_on_meta():
                # Unannotated in transformers: a config in, a model out.
                from_config = cast(
                    Callable[..., "PreTrainedModel"], AutoModelForCausalLM.from_config
                )
                model = from_config(config, attn_implementation="sdpa", **dtype_kwarg(dtype))
            model.config.name_or_path = str(path)
            if (path / "generation_config.json").is_file():  # as from_pretrained reads it
                model.generation_config = GenerationConfig.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - a corrupt file can raise anything
        raise ModelLoadError(f"model {path}: cannot load the weights ({exc})") from None
    model.config.use_cache = False
    return model


def lora_targets(model: nn.Module, wanted: list[str] | None = None) -> tuple[list[str], bool]:
    """peft's target_modules by veri_tui/jobfolder/knobs/lora_targets.py's rule (the one the planner
    counts by): the attention and MLP projections this model has, attention only in a mixture of
    experts, or those of them `wanted` names (lora_target_modules); and whether it is one."""
    moe = is_moe(name for name, _ in model.named_parameters())
    linears = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    present = target_modules(linears, moe)
    if wanted is None:
        return present, moe
    try:
        return chosen(present, moe, wanted), moe
    except ValueError as exc:
        raise ConfigError(f"lora_target_modules: {exc}") from None


def check_experts(model: nn.Module, cfg: TrainConfig) -> None:
    """Refuse a full fine-tune on several ranks of a MoE built with one module per expert.

    transformers 4 builds each routed expert as its own nn.Linear modules and runs only the
    experts its tokens are routed to, so ranks end a backward with gradients for different
    parameters: FSDP2's reduce-scatters then disagree between ranks (gloo aborted on the tiny
    MoE at step 2, transformers 4.56) and DDP, without find_unused_parameters, refuses a
    step in which a parameter got no gradient. transformers 5 fuses the experts into 3-D
    parameters that every backward reaches; LoRA leaves the experts frozen.
    """
    if cfg.lora_rank or cfg.data_parallel_size <= 1:
        return
    per_expert = any(
        isinstance(m, nn.Linear) and ROUTED_EXPERTS in name.split(".")
        for name, m in model.named_modules()
    )
    if per_expert:
        import transformers

        raise ConfigError(
            f"lora_rank: a full fine-tune of this mixture of experts on {cfg.data_parallel_size} "
            f"ranks cannot run with transformers {transformers.__version__}, which builds one "
            "module per expert (ranks would reduce different experts' gradients); use "
            "transformers 5 or later (fused experts), set lora_rank, or train on one GPU"
        )


def build_policy(cfg: TrainConfig, path: Path, device: torch.device | None = None) -> nn.Module:
    """The model being trained: full fine-tune, or a PEFT LoRA model over a frozen base
    (bf16, or NF4 with load_in_4bit on `device`, a CUDA GPU)."""
    train_dtype = torch.bfloat16 if cfg.precision == "bf16" else torch.float32
    quantized = qlora_kwargs(device or torch.device("cpu")) if cfg.load_in_4bit else None
    model = load_base(path, torch.bfloat16 if cfg.lora_rank else train_dtype, quantized)
    check_experts(model, cfg)
    checkpointing.apply(model, cfg.activation_checkpointing)
    model.train()  # from_pretrained leaves eval mode, which turns gradient checkpointing off
    if not cfg.lora_rank:
        return defer(model, path)
    from peft import LoraConfig, get_peft_model

    targets, _ = lora_targets(model, cfg.lora_target_modules)
    if not targets:
        raise ModelLoadError(f"model {path}: none of {LORA_TARGETS} found for LoRA")
    lora = LoraConfig(
        r=cfg.lora_rank,
        # peft annotates lora_alpha as int but scales by alpha / r: the schema's float alpha
        # (2 x lora_rank by default, fractional if asked) is what it computes with.
        lora_alpha=cfg.effective_lora_alpha,  # type: ignore[arg-type]
        lora_dropout=cfg.lora_dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )
    # autocast_adapter_dtype=False: we choose the adapter dtype (fp32: ADAPTER_DTYPE), not peft.
    with cpu_stand_ins(model, lambda name: name.rsplit(".", 1)[-1] in targets):
        model = get_peft_model(model, lora, autocast_adapter_dtype=False)
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.to(ADAPTER_DTYPE)
    return defer(model, path)


def build_reference(path: Path) -> nn.Module:
    """A frozen bf16 copy of the base for DPO full fine-tune (2 bytes/param)."""
    ref = load_base(path, torch.bfloat16)
    ref.eval()
    ref.requires_grad_(False)
    return defer(ref, path)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks (by the model's own `_no_split_modules`), in order.

    Also once sharded: FSDP2 gives each wrapped block a subclass named FSDP<class>.
    """
    names: set[str] = set()
    for m in model.modules():
        names.update(getattr(m, "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__.removeprefix("FSDP") in names]
    if not layers:
        raise ModelLoadError("model: cannot find its decoder layers to shard per layer")
    return layers
