"""Guard a graded call: library matmuls are refused, and kernel launches are counted.

Inside ``with Guard():``
- every library matmul path (torch.matmul, mm, bmm, addmm, the @ operator, F.linear, einsum,
  tensordot, ... and the ATen ops under them, however reached) raises ``ForbiddenCallError``
  naming the call;
- host numpy matmuls and copies of tensors to the host (to do the work there) are refused too;
- Triton launches are counted, so a check can tell that a kernel actually ran;
- optionally (``poison=True``) every uninitialised float tensor allocated is filled with NaN, so
  an output element the kernel never writes cannot pass.

Triton's own machinery (its interpreter multiplies tiles with numpy) runs while a launch is in
progress and is trusted: the guard stands aside for the duration of a launch.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from course import device, record
from course.dispatch_mode import LazyDynamoDispatchMode


class ForbiddenCallError(RuntimeError):
    """A graded function called something the exercise forbids."""

    def __init__(self, call: str, why: str = "a library matmul does the work the exercise asks you to do"):
        self.call = call
        super().__init__(f"{call} is not allowed inside a graded function: {why}")


class KernelDefinedTooEarly(RuntimeError):
    """A compiled Triton kernel was launched although the course runs on the CPU interpreter."""


_TORCH_FUNCTIONS: dict[Any, str] = {
    torch.matmul: "torch.matmul",
    torch.mm: "torch.mm",
    torch.bmm: "torch.bmm",
    torch.addmm: "torch.addmm",
    torch.baddbmm: "torch.baddbmm",
    torch.addbmm: "torch.addbmm",
    torch.addmv: "torch.addmv",
    torch.mv: "torch.mv",
    torch.dot: "torch.dot",
    torch.vdot: "torch.vdot",
    torch.inner: "torch.inner",
    torch.einsum: "torch.einsum",
    torch.tensordot: "torch.tensordot",
    torch.chain_matmul: "torch.chain_matmul",
    torch.linalg.matmul: "torch.linalg.matmul",
    torch.linalg.multi_dot: "torch.linalg.multi_dot",
    F.linear: "torch.nn.functional.linear",
    F.bilinear: "torch.nn.functional.bilinear",
    F.scaled_dot_product_attention: "torch.nn.functional.scaled_dot_product_attention",
    torch.Tensor.__matmul__: "the @ operator",
    torch.Tensor.__rmatmul__: "the @ operator",
    torch.Tensor.matmul: "the @ operator (Tensor.matmul)",
    torch.Tensor.mm: "Tensor.mm",
    torch.Tensor.bmm: "Tensor.bmm",
    torch.Tensor.addmm: "Tensor.addmm",
    torch.Tensor.addmm_: "Tensor.addmm_",
    torch.Tensor.baddbmm: "Tensor.baddbmm",
    torch.Tensor.mv: "Tensor.mv",
    torch.Tensor.dot: "Tensor.dot",
    torch.Tensor.inner: "Tensor.inner",
}

_HOST_COPIES: dict[Any, str] = {
    torch.Tensor.numpy: "Tensor.numpy",
    torch.Tensor.tolist: "Tensor.tolist",
}

_ATEN_MATMULS = frozenset(
    {
        "mm", "bmm", "addmm", "addmm_", "baddbmm", "baddbmm_", "addbmm", "addbmm_", "matmul", "linear",
        "dot", "vdot", "mv", "addmv", "addmv_", "einsum", "tensordot", "inner", "_scaled_mm",
        "_int_mm", "_addmm_activation", "bilinear", "_trilinear", "chain_matmul", "linalg_multi_dot",
        # attention's two matmuls in one library call (PyTorch's SDPA and the backends it dispatches to)
        "scaled_dot_product_attention", "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_attention_math", "_flash_attention_forward",
        "_efficient_attention_forward",
    }
)

_ATEN_ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})

_NUMPY_FUNCTIONS = (
    (np, "matmul", "numpy.matmul"),
    (np, "dot", "numpy.dot"),
    (np, "einsum", "numpy.einsum"),
    (np, "tensordot", "numpy.tensordot"),
    (np, "inner", "numpy.inner"),
    (np, "vdot", "numpy.vdot"),
    (np.linalg, "multi_dot", "numpy.linalg.multi_dot"),
)

_state = threading.local()


def _active() -> Guard | None:
    return getattr(_state, "guard", None)


def _trusted() -> bool:
    return getattr(_state, "trusted_depth", 0) > 0


class _LaunchScope:
    """Marks a Triton launch in progress: the guard trusts the launcher and counts the launch."""

    def __init__(self, kernel_name: str):
        self.kernel_name = kernel_name

    def __enter__(self) -> None:
        guard = _active()
        if guard is not None and not _trusted():
            guard.launches.append(self.kernel_name)
        _state.trusted_depth = getattr(_state, "trusted_depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _state.trusted_depth -= 1


@contextmanager
def trusted() -> Iterator[None]:
    """Let harness code (input generation, cache flushes, output checks) run inside a guard."""
    _state.trusted_depth = getattr(_state, "trusted_depth", 0) + 1
    try:
        yield
    finally:
        _state.trusted_depth -= 1


def _kernel_name(kernel: Any) -> str:
    fn = getattr(kernel, "fn", None)
    return getattr(fn, "__name__", None) or getattr(kernel, "__name__", type(kernel).__name__)


_probes_installed = False


def install_launch_probes() -> None:
    """Wrap Triton's launch entry points once per process (compiled and interpreted kernels)."""
    global _probes_installed
    if _probes_installed:
        return
    import triton.compiler
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    def wrap(run: Callable[..., Any], compiled: bool) -> Callable[..., Any]:
        @functools.wraps(run)
        def counted_run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if compiled and device.info().interpret:
                raise KernelDefinedTooEarly(
                    f"kernel {_kernel_name(self)!r} was compiled for a GPU, but this machine runs Triton "
                    "in the CPU interpreter: it was defined before `course.device.configure()`. Restart the "
                    "kernel and run the notebook from the top (the first cell chooses the device)."
                )
            with _LaunchScope(_kernel_name(self)):
                return run(self, *args, **kwargs)

        return counted_run

    JITFunction.run = wrap(JITFunction.run, compiled=True)
    InterpretedFunction.run = wrap(InterpretedFunction.run, compiled=False)
    # A kernel looks up `triton.compiler.compile` at its first launch; autotuning is timed whole.
    triton.compiler.compile = _timed_as_compile(triton.compiler.compile)
    Autotuner._bench = _timed_as_compile(Autotuner._bench)
    _probes_installed = True


def _timed_as_compile(work: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(work)
    def timed(*args: Any, **kwargs: Any) -> Any:
        outermost = getattr(_state, "compile_depth", 0) == 0
        _state.compile_depth = getattr(_state, "compile_depth", 0) + 1
        started = time.perf_counter()
        try:
            return work(*args, **kwargs)
        finally:
            _state.compile_depth -= 1
            if outermost:
                record.add_compile_time(time.perf_counter() - started)

    return timed


class _RefuseLibraryCalls(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if not _trusted():
            name = _TORCH_FUNCTIONS.get(func)
            if name is not None:
                raise ForbiddenCallError(name)
            name = _HOST_COPIES.get(func)
            if name is not None:
                raise ForbiddenCallError(name, "copying data to the host to compute there is not allowed")
        return func(*args, **(kwargs or {}))


def _is_host_copy(name: str, args: tuple, kwargs: dict) -> bool:
    if name == "_to_copy" and args and isinstance(args[0], torch.Tensor):
        target = kwargs.get("device")
        return args[0].is_cuda and target is not None and torch.device(target).type == "cpu"
    if name == "copy_" and len(args) >= 2 and all(isinstance(a, torch.Tensor) for a in args[:2]):
        return args[1].is_cuda and not args[0].is_cuda
    return False


class _RefuseAtenCalls(LazyDynamoDispatchMode):
    """Catches what the function-level mode cannot see, e.g. ``torch.ops.aten.mm`` called directly."""

    def __init__(self, poison: bool):
        super().__init__()
        self.poison = poison

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if not _trusted():
            if name in _ATEN_MATMULS:
                raise ForbiddenCallError(f"aten.{name} (a library matmul, however it was reached)")
            if _is_host_copy(name, args, kwargs):
                raise ForbiddenCallError(
                    "copying a GPU tensor to the host", "computing on the host is not allowed"
                )
        result = func(*args, **kwargs)
        poisonable = isinstance(result, torch.Tensor) and result.dtype != torch.bool
        if self.poison and name in _ATEN_ALLOCATIONS and poisonable:
            floating = result.is_floating_point() or result.is_complex()
            result.fill_(float("nan") if floating else -1)  # an integer element never written shows as -1
        return result


def _refusing_numpy(original: Callable[..., Any], name: str) -> Callable[..., Any]:
    @functools.wraps(original)
    def refuse(*args: Any, **kwargs: Any) -> Any:
        if _trusted():
            return original(*args, **kwargs)
        raise ForbiddenCallError(name, "a host library matmul does the work the exercise asks you to do")

    return refuse


class Guard:
    """Context manager for one graded call. ``launches`` lists the Triton kernels launched."""

    def __init__(self, poison: bool = False):
        self.poison = poison
        self.launches: list[str] = []
        self._modes: list[Any] = []
        self._numpy_originals: list[tuple[Any, str, Any]] = []

    @property
    def launched(self) -> bool:
        return bool(self.launches)

    def __enter__(self) -> Guard:
        if _active() is not None:
            raise RuntimeError("guards do not nest")
        install_launch_probes()
        _state.guard = self
        for module, attribute, name in _NUMPY_FUNCTIONS:
            original = getattr(module, attribute)
            self._numpy_originals.append((module, attribute, original))
            setattr(module, attribute, _refusing_numpy(original, name))
        self._modes = [_RefuseLibraryCalls(), _RefuseAtenCalls(self.poison)]
        for mode in self._modes:
            mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        for mode in reversed(self._modes):
            mode.__exit__(None, None, None)
        for module, attribute, original in self._numpy_originals:
            setattr(module, attribute, original)
        self._numpy_originals.clear()
        _state.guard = None


def user_cuda_kernels(fn: Callable[..., Any], *args: Any) -> list[str]:
    """Names of CUDA kernels ``fn(*args)`` launched that are not PyTorch's or cuBLAS's own.

    Used when no Triton launch was seen, to recognise kernels written in CUDA C (through CuPy or
    a C++ extension). Needs a GPU and PyTorch's profiler.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    library_markers = ("at::", "cublas", "cutlass", "gemm", "sgemm", "xmma", "gemv", "elementwise", "memset")
    names = {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}
    return sorted(n for n in names if not any(m in n.lower() for m in library_markers) and "Memcpy" not in n)
