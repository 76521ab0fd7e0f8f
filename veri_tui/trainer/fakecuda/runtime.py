"""torch.cuda's Python side and the fake-tensor rules a GPU run needs, set for a trace only.

With the device of veri_tui/trainer/fakecuda/device.py in place, what is still missing is
Python: `torch.cuda` answers as a machine without a driver does ("Found no NVIDIA driver"
from `current_device()` in FSDP2's mesh lookup, "CUDA driver version is insufficient" from
`Stream()`), and fake tensors lack a few rules. `patched(gpus, name)` sets, and on exit
restores, exactly these:

- `torch.cuda`: available with `gpus` devices (a node's), device 0 current, streams and
  events that do nothing (one stream: fake tensors have no work to order), `synchronize`,
  RNG state (checkpointed layers save and restore it), bf16 supported, the device's name,
  properties and compute capability (a Hopper's: `Properties`);
  `torch.Generator(device="cuda")` gives a CPU generator (no CUDA generator without CUDA:
  the bf16 AdamW draws its rounding bits with one; the draws are fake anyway);
- `aten._pin_memory`: a fake CPU tensor (FakeTensorMode has no rule: "NYI", which the
  default `CPUOffloadPolicy(pin_memory=True)` hits);
- scalar reads (`.item()`, `.tolist()`, `float(t)`): 1 of the tensor's dtype instead of
  DataDependentOutputException. The trainer reads scalars for its logs (the loss, the
  grad norm), for the step's token count (a divisor: 1, never 0), for AdamW's step number,
  and transformers reads one to ask whether an attention mask has padding (1: none, the
  trace's rows are full length, as the plan assumes);
- transformers takes fake tensors for a graph being traced (`is_tracing`), where a mask's
  values cannot be read, and then always passes SDPA its attention mask; on a GPU it reads
  the mask and, with no padding in it, drops it for SDPA's `is_causal` (the flash kernel).
  Here it reads the values as a GPU run does (1: no padding, above), except where it asks
  whether position ids restart inside a row (packing: the trace's packed rows hold two
  samples each, so the answer is yes, as its tracing branch assumes);
- DDP's start-up check that the ranks' parameter shapes agree (it reads tensor bytes in
  C++) is skipped: one process, nothing to disagree with; and the warning about a fake
  tensor's data pointer (the bf16 AdamW compares two, harmlessly: equal) is silenced;
- torch's optimizers take their foreach path for fake parameters as for CUDA ones (a fake
  parameter is a FakeTensor, which torch's list of foreach types lacks);
- DTensor's sharding propagation runs its global-shape shadow ops in a private fake mode,
  as in an eager run (it reuses the active one when there is one, and a tracker in that
  mode would count the shadow ops as memory: 11 MiB of a small FSDP2 optimizer step
  counted twice, tens of GiB at 8B).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._subclasses import fake_impls
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, in_kernel_invocation_manager

_aten = torch.ops.aten


class Mode(FakeTensorMode):  # type: ignore[no-untyped-call]
    """FakeTensorMode as on a machine without CUDA, which torch.cuda here denies being:
    Python data for `torch.tensor(..., device="cuda")` is made on the host and moved by an
    op the mode sees, and a constant host tensor moved to the GPU is not computed for real
    (both would reach CUDA kernels the CPU wheel does not have). Real meta parameters and
    host buffers (the model is built outside the mode) become fake where they meet fake
    ones (`allow_non_fake_inputs`); a device mismatch still raises, as on a GPU."""

    def __init__(self) -> None:
        super().__init__(allow_non_fake_inputs=True)

    @property
    def avoid_device_init(self) -> bool:
        """Always: there is no device."""
        return True


class Stream:
    """A CUDA stream that orders nothing (every stream is the one default stream)."""

    def __init__(self, device: Any = None, priority: int = 0, **_: Any) -> None:
        self.device = torch.device("cuda", 0)
        self.priority = priority
        self.device_index, self.device_type, self.stream_id, self.cuda_stream = 0, 1, 0, 0

    def wait_stream(self, stream: Any) -> None:
        """Nothing to wait for."""

    def wait_event(self, event: Any) -> None:
        """Nothing to wait for."""

    def record_event(self, event: Any = None) -> Any:
        """The event given, or a new one; it records nothing."""
        return event if event is not None else Event()

    def synchronize(self) -> None:
        """Nothing is running."""

    def query(self) -> bool:
        """Always done."""
        return True

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *_: Any) -> None:
        return None


class Event:
    """A CUDA event that is always complete."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    def record(self, stream: Any = None) -> None:
        """Nothing to record."""

    def wait(self, stream: Any = None) -> None:
        """Nothing to wait for."""

    def query(self) -> bool:
        """Always complete."""
        return True

    def synchronize(self) -> None:
        """Always complete."""

    def elapsed_time(self, other: Any) -> float:
        """No time passes on a fake device."""
        return 0.0


class Device:
    """`torch.cuda.device(i)`: a context that selects nothing (there is one device); a class,
    since callers test `isinstance(x, torch.cuda.device)`."""

    def __init__(self, device: Any = None) -> None:
        self.idx = 0

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *_: Any) -> None:
        return None


_STREAM = Stream()
_REAL_GENERATOR = torch.Generator


class _Generator(_REAL_GENERATOR):
    """torch.Generator, giving a CPU generator where a CUDA one is asked for (none exists
    here). A class, not a function: annotations such as `torch.Generator | None` are
    evaluated at run time; what it makes are plain torch generators."""

    def __new__(cls, device: Any = "cpu") -> torch.Generator:  # type: ignore[misc]
        if torch.device(device).type == "cuda":
            return _REAL_GENERATOR("cpu")
        return _REAL_GENERATOR(device)


#: Memory (bytes) of the GPUs a trace may be told it runs on, as CUDA reports them (an H100
#: SXM and an H200, seen on the lent machines); any other name gets the H100's.
MEMORY_OF = {"NVIDIA H100 80GB HBM3": 81559 << 20, "NVIDIA H200": 143771 << 20}


class Properties:
    """What `torch.cuda.get_device_properties` answers for the GPU played: a Hopper (compute
    capability 9.0, 132 SMs) named `name` (transformers asks the capability before taking
    grouped GEMMs for a mixture of experts' experts, as on an H100)."""

    def __init__(self, name: str) -> None:
        self.name, self.major, self.minor = name, 9, 0
        self.total_memory = MEMORY_OF.get(name, MEMORY_OF["NVIDIA H100 80GB HBM3"])
        self.multi_processor_count = 132


def cuda_functions(gpus: int, name: str) -> dict[str, Any]:
    """torch.cuda's attributes as a node with `gpus` GPUs called `name` answers them."""
    rng = torch.zeros(16, dtype=torch.uint8)  # a CUDA generator's state is 16 bytes
    props = Properties(name)
    return {
        "get_device_properties": lambda device=None: props,
        "get_device_capability": lambda device=None: (props.major, props.minor),
        "is_available": lambda: True,
        "device_count": lambda: gpus,
        "current_device": lambda: 0,
        "set_device": lambda device: None,
        "_lazy_init": lambda: None,
        "is_initialized": lambda: True,
        "is_bf16_supported": lambda *a, **k: True,
        "get_device_name": lambda device=None: name,
        "Stream": Stream,
        "Event": Event,
        "current_stream": lambda device=None: _STREAM,
        "default_stream": lambda device=None: _STREAM,
        "stream": lambda stream=None: contextlib.nullcontext(stream),
        "synchronize": lambda device=None: None,
        "get_rng_state": lambda device="cuda": rng.clone(),
        "set_rng_state": lambda state, device="cuda": None,
        "manual_seed": lambda seed: None,
        "manual_seed_all": lambda seed: None,
        "device": Device,
    }


def _pin_memory(mode: FakeTensorMode, func: Any, x: FakeTensor, *_: Any, **__: Any) -> FakeTensor:
    """A pinned copy: a fake CPU tensor of the same shape and strides."""
    with in_kernel_invocation_manager(mode):
        meta = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
    return FakeTensor(mode, meta, torch.device("cpu"))


def _scalar(mode: FakeTensorMode, func: Any, x: FakeTensor, *_: Any, **__: Any) -> Any:
    """1 as the tensor's kind of number (module docstring: why 1)."""
    if x.dtype == torch.bool:
        return True
    return 1.0 if x.dtype.is_floating_point or x.dtype.is_complex else 1


FAKE_RULES: dict[Any, Callable[..., Any]] = {
    _aten._pin_memory.default: _pin_memory,
    _aten._local_scalar_dense.default: _scalar,
    _aten.item.default: _scalar,
}


@contextlib.contextmanager
def _attributes(owner: Any, values: dict[str, Any]) -> Iterator[None]:
    missing = object()
    saved = {k: getattr(owner, k, missing) for k in values}
    for k, v in values.items():
        setattr(owner, k, v)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is missing:
                delattr(owner, k)
            else:
                setattr(owner, k, v)


@contextlib.contextmanager
def _rules(rules: dict[Any, Callable[..., Any]]) -> Iterator[None]:
    table = fake_impls.op_implementations_dict
    saved = {op: table.get(op) for op in rules}
    table.update(rules)
    try:
        yield
    finally:
        for op, impl in saved.items():
            if impl is None:
                table.pop(op, None)
            else:
                table[op] = impl


def _same_shapes(process_group: Any, tensors: Any, logger: Any = None) -> None:
    """DDP's check that every rank's parameters have the same shapes reads their bytes (a
    C++ collective over the flattened shapes); the fake group has one process: they agree."""


@contextlib.contextmanager
def patched(gpus: int, name: str) -> Iterator[None]:
    """The module docstring's changes, for the duration of the block."""
    import torch.distributed.tensor._sharding_prop as sharding_prop
    import torch.nn.parallel.distributed as ddp

    with contextlib.ExitStack() as stack:
        stack.enter_context(_attributes(torch.cuda, cuda_functions(gpus, name)))
        stack.enter_context(_attributes(torch, {"Generator": _Generator}))
        stack.enter_context(_rules(FAKE_RULES))
        stack.enter_context(_attributes(sharding_prop, {"detect_fake_mode": lambda *a: None}))
        verify = {"_verify_param_shape_across_processes": _same_shapes}
        stack.enter_context(_attributes(ddp, verify))
        import torch.optim.optimizer as optim

        # A fake parameter is a FakeTensor, not a Parameter, so torch's AdamW would take its
        # one-tensor-at-a-time path where CUDA takes foreach (one temporary the size of the
        # second moments: the plan's optimizer step; DTensor is on the list already).
        foreach = [*optim._foreach_supported_types, FakeTensor]
        stack.enter_context(_attributes(optim, {"_foreach_supported_types": foreach}))
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
        import transformers.masking_utils as masking
        import transformers.utils.import_utils as hf_utils

        stack.enter_context(_attributes(hf_utils, {"is_fake_tensor": lambda t: False}))
        find = masking.find_packed_sequence_indices

        def packed(position_ids: torch.Tensor) -> Any:
            # Its values say whether a row holds several samples; a trace's packed rows do
            # (trace.py), which the tracing branch answers without reading them.
            with _attributes(hf_utils, {"is_fake_tensor": lambda t: True}):
                return find(position_ids)

        stack.enter_context(_attributes(masking, {"find_packed_sequence_indices": packed}))
        yield
