"""A CUDA device that is not there: torch's C++ side told that CUDA exists, with no compiler.

Fake CUDA tensors (FakeTensorMode: shapes, dtypes and devices, no storage) need three things
from torch's C++ side that a machine without a GPU does not give:

- a device guard in the CUDA slot of c10's registry (autograd records every tensor's device
  and stream: "PyTorch is not linked with support for cuda devices" aborts the process on
  the CPU wheel). torch ships one whose streams are all the default stream and whose events
  do nothing: `torch._C._acc.DeviceGuard` (its Python backends' guard), with the device type
  it reports chosen in Python. It can only be registered for PrivateUse1, so it is registered
  there and its pointer copied into the CUDA slot (`c10::impl::device_guard_impl_registry`,
  an exported symbol of libc10.so), then the PrivateUse1 slot is emptied again;
- the CUDA hooks saying CUDA is built (`isBuilt`: autograd's InputBuffer asks the current
  accelerator for its stream, and on the CPU wheel there is none) and that device 0 has a
  primary context (`hasPrimaryContext`: the engine stashes the caller's streams; the CUDA
  wheel raises "hasPrimaryContext expects a valid device index" without a GPU). Both are
  virtual methods of the live `at::detail::getCUDAHooks()` object: their two vtable slots
  are pointed at ctypes callbacks that return true.

Everything is done through ctypes on exported symbols, so neither g++ nor ninja is needed.
It depends on torch's ABI: the vtable slots are those of torch TORCH_VERSION's headers
(AcceleratorHooksInterface: the virtual destructor's two entries, isBuilt, isAvailable,
hasPrimaryContext), so any other torch is refused (`check_torch`). `installed()` undoes it
all on exit: the registry slot, the two vtable entries; after it the process has no CUDA
again, and a real CUDA allocation fails as it did before.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections.abc import Iterator
from typing import Any

import torch

#: The torch release this module is written and tested against (its ABI and private APIs).
TORCH_VERSION = "2.13.0"
_CUDA, _PRIVATE_USE1 = 1, 20  # c10::DeviceType values
_IS_BUILT, _HAS_PRIMARY_CONTEXT = 2, 4  # vtable slots of at::CUDAHooksInterface (2.13.0)
_REGISTRY = "_ZN3c104impl26device_guard_impl_registryE"
_GET_HOOKS = "_ZN2at6detail12getCUDAHooksEv"
_PROT_READ, _PROT_WRITE = 1, 2

# The replacements must outlive every call into them: kept at module level.
_true = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p)(lambda this: True)
_true_at = ctypes.CFUNCTYPE(ctypes.c_bool, ctypes.c_void_p, ctypes.c_int8)(lambda this, i: True)
_lock = threading.Lock()


class FakeCudaError(RuntimeError):
    """The fake device cannot be set up here (another torch, a missing symbol)."""


def check_torch() -> None:
    """Refuse any torch but TORCH_VERSION: the vtable slots and private modules used here are
    that release's."""
    version = torch.__version__.split("+")[0]
    if version != TORCH_VERSION:
        raise FakeCudaError(
            f"torch {torch.__version__}: the fake CUDA device is tested on torch "
            f"{TORCH_VERSION} only (it patches that release's C++ hooks); "
            f"pip install torch=={TORCH_VERSION}"
        )


class _Guard(torch._C._acc.DeviceGuard):
    """torch's no-op Python-backend guard, reporting itself as CUDA's."""

    def type_(self) -> Any:  # the stub says a device; C++ reads a c10::DeviceType
        return torch._C._autograd.DeviceType.CUDA


def _lib(name: str) -> ctypes.CDLL:
    return ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", name))


class _Patch:
    """The three writes into torch's memory, and what was there before each."""

    def __init__(self) -> None:
        c10, cpu = _lib("libc10.so"), _lib("libtorch_cpu.so")
        try:
            self.registry = (ctypes.c_void_p * 32).in_dll(c10, _REGISTRY)
            get_hooks = getattr(cpu, _GET_HOOKS)
        except (AttributeError, ValueError) as exc:
            raise FakeCudaError(f"fake CUDA: torch's library lacks a symbol ({exc})") from None
        get_hooks.restype = ctypes.c_void_p
        vptr = ctypes.c_void_p.from_address(get_hooks()).value
        if not vptr:
            raise FakeCudaError("fake CUDA: torch's CUDA hooks have no vtable")
        self.vtable = (ctypes.c_void_p * (_HAS_PRIMARY_CONTEXT + 1)).from_address(vptr)
        self.saved_slots = (self.vtable[_IS_BUILT], self.vtable[_HAS_PRIMARY_CONTEXT])
        self.saved_guard = self.registry[_CUDA]
        self.guard = _Guard()

    def _write_vtable(self, is_built: int | None, primary: int | None) -> None:
        page = os.sysconf("SC_PAGE_SIZE")
        start = ctypes.addressof(self.vtable) & ~(page - 1)
        libc = ctypes.CDLL(None)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        if libc.mprotect(start, 2 * page, _PROT_READ | _PROT_WRITE) != 0:
            raise FakeCudaError("fake CUDA: cannot make torch's CUDA hooks writable (mprotect)")
        self.vtable[_IS_BUILT], self.vtable[_HAS_PRIMARY_CONTEXT] = is_built, primary
        libc.mprotect(start, 2 * page, _PROT_READ)

    def apply(self) -> None:
        if self.registry[_PRIVATE_USE1]:
            raise FakeCudaError("fake CUDA: a PrivateUse1 backend is registered in this process")
        if not torch._C._acc.register_python_privateuseone_device_guard(self.guard):
            raise FakeCudaError("fake CUDA: torch refused the device guard")
        self.registry[_CUDA] = self.registry[_PRIVATE_USE1]
        self.registry[_PRIVATE_USE1] = None
        is_built = ctypes.cast(_true, ctypes.c_void_p).value
        self._write_vtable(is_built, ctypes.cast(_true_at, ctypes.c_void_p).value)

    def undo(self) -> None:
        self._write_vtable(*self.saved_slots)
        self.registry[_CUDA] = self.saved_guard


_active: list[_Patch] = []


@contextlib.contextmanager
def installed() -> Iterator[None]:
    """torch believes in one CUDA device inside; outside, nothing is left changed. Not
    re-entrant across threads (one trace at a time per process)."""
    check_torch()
    with _lock:
        if _active:
            raise FakeCudaError("fake CUDA: already installed in this process")
        patch = _Patch()
        patch.apply()
        _active.append(patch)
    try:
        yield
    finally:
        with _lock:
            _active.pop().undo()
