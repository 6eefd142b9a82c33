"""Record the launch plan of one call of a graded function, as plain data for the grader's judge.

While ``record_call(fn, inputs)`` runs ``fn(*inputs)`` it notes every buffer the call allocates
(through torch), every Triton launch (the kernel, its specialisation and compile options, the grid,
each scalar, and for each pointer which buffer it points into and where), every CUDA C launch made
through ``course.cuda`` (recorded there, into ``active()``), and every other torch operation.
The judge replays the plan on its own inputs without running any Python of the student's:
allocations and views are allowed in a graded function; anything else done with the data (a
library call, host work, a second stream) cannot be replayed and is listed in ``problems``. The
plan is JSON: it leaves the sandbox as data, and the judge trusts none of it beyond what it can
check.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from course.dispatch_mode import LazyDynamoDispatchMode
from course.recorder import descriptors
from course.recorder.plan_format import (
    COMPILE_OPTIONS,
    NOMINAL_TARGET,
    PLAN_VERSION,
    describe_inputs,
    encode_value,
    ttgir_digest,
)

_aten = torch.ops.aten
# Factory ops: what the allocated buffer starts as ("empty": the judge fills it with NaN).
_ALLOCATIONS: dict[Any, str] = {
    _aten.empty.memory_format: "empty", _aten.empty_strided.default: "empty", _aten.empty_like.default: "empty",
    _aten.new_empty.default: "empty", _aten.new_empty_strided.default: "empty",
    _aten.zeros.default: "zeros", _aten.zeros_like.default: "zeros", _aten.new_zeros.default: "zeros",
    _aten.ones.default: "ones", _aten.ones_like.default: "ones", _aten.new_ones.default: "ones",
    _aten.full.default: "full", _aten.full_like.default: "full", _aten.new_full.default: "full",
}
_FULL_VALUE_ARG = {_aten.full.default: 1, _aten.full_like.default: 1, _aten.new_full.default: 2}
_FILLS = {_aten.zero_.default: "zeros", _aten.fill_.Scalar: "full"}
# Ops that only read metadata or make views (no data moves).
_METADATA = {_aten.detach.default, _aten.alias.default, _aten.sym_size.int, _aten.sym_stride.int,
             _aten.sym_numel.default, _aten.sym_storage_offset.default, _aten.is_contiguous.default,
             _aten.is_contiguous.memory_format}

@dataclass
class _Buffer:
    name: str
    base: int
    nbytes: int
    info: dict[str, Any]


@dataclass
class _Recording:
    inputs: list[_Buffer]
    allocations: list[_Buffer] = field(default_factory=list)
    launches: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    stream: Any = None
    in_launch: int = 0
    poison: bool = False

    def locate(self, address: int) -> dict[str, Any] | None:
        found = self.locate_in_buffer(address)
        return found[0] if found else None

    def locate_in_buffer(self, address: int) -> tuple[dict[str, Any], int] | None:
        """Where an address points ({buffer, offset}) and that buffer's size in bytes, or None."""
        # Later allocations first: the caching allocator may hand out an address range again.
        for buffer in [*reversed(self.allocations), *self.inputs]:
            if buffer.base <= address < buffer.base + max(buffer.nbytes, 1):
                return {"buffer": buffer.name, "offset": address - buffer.base}, buffer.nbytes
        return None

    def problem(self, text: str) -> None:
        if text not in self.problems:
            self.problems.append(text)


_state = threading.local()


def _current() -> _Recording | None:
    return getattr(_state, "recording", None)


def active() -> _Recording | None:
    """The recording in progress on this thread (``record_call``), or None: where ``course.cuda`` adds launches."""
    return _current()


def _storage(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class _WatchOps(LazyDynamoDispatchMode):
    """Notes allocations and fills; any other data op makes the plan unreplayable."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        recording = _current()
        if recording is None or recording.in_launch:
            return out
        if func in _ALLOCATIONS and isinstance(out, torch.Tensor):
            base, nbytes = _storage(out)
            init = _ALLOCATIONS[func]
            info = {"nbytes": nbytes, "dtype": str(out.dtype).removeprefix("torch."), "init": init}
            if init == "ones":
                info.update(init="full", value=1.0)
            elif init == "full":
                fill = args[_FULL_VALUE_ARG[func]] if len(args) > _FULL_VALUE_ARG[func] else None
                info["value"] = float(fill) if isinstance(fill, int | float) else None
            recording.allocations.append(_Buffer(f"alloc{len(recording.allocations)}", base, nbytes, info))
            if init == "empty" and recording.poison and out.dtype != torch.bool:
                # On a CPU the sandbox's own outputs are checked: unwritten elements must show, as NaN (or -1
                # in an integer buffer, as the judge's replay fills it), never as what the memory last held.
                recording.in_launch += 1
                try:
                    out.fill_(float("nan") if out.is_floating_point() else -1)
                finally:
                    recording.in_launch -= 1
        elif func in _FILLS and isinstance(args[0], torch.Tensor):
            where = recording.locate(_storage(args[0])[0])
            if where is None or not where["buffer"].startswith("alloc") or where["offset"] != 0:
                recording.problem(f"{func} wrote to memory not allocated in the call")
            else:
                buffer = next(b for b in recording.allocations if b.name == where["buffer"])
                buffer.info["init"] = _FILLS[func]
                if func is _aten.fill_.Scalar:
                    buffer.info["value"] = float(args[1]) if isinstance(args[1], int | float) else None
        elif func in _METADATA or getattr(func, "is_view", False):
            pass
        else:
            recording.problem(f"the graded function called torch operation {func}: only allocations, views "
                              "and kernel launches can be replayed")
        return out


def _record_launch(jit_fn: Any, args: tuple, kwargs: dict, grid: Any, kernel: Any, stream: Any) -> None:
    """Add one Triton launch (compiled, on a GPU) to the current recording."""
    from triton import knobs
    from triton.runtime.driver import driver

    recording = _current()
    launch: dict[str, Any] = {"kernel": jit_fn.fn.__name__}
    kw = dict(kwargs)
    kw["debug"] = kw.get("debug", jit_fn.debug) or knobs.runtime.debug
    kw["instrumentation_mode"] = knobs.compilation.instrumentation_mode
    device = driver.active.get_current_device()
    _, _, target, backend, binder = jit_fn.device_caches[device]
    bound_args, specialization, options = binder(*args, **kw)
    options, signature, constexprs, attrs = jit_fn._pack_args(backend, kw, bound_args, specialization, options)
    if callable(grid):
        grid = grid(bound_args)
    grid = [int(g) for g in (*grid, 1, 1)[:3]]
    if any(not isinstance(t, str) for t in signature.values()):
        recording.problem(f"kernel {launch['kernel']} takes tuple arguments, which the judge cannot replay")
        return
    encoded = []
    for path, value in constexprs.items():
        tagged = encode_value(value)
        if tagged is None:
            recording.problem(f"constexpr {path} of kernel {launch['kernel']} has type {type(value).__name__}")
            return
        encoded.append([list(path), tagged])
    arguments = []
    for (name, kind), value in zip(signature.items(), bound_args.values(), strict=True):
        if kind == "constexpr":
            continue
        as_what = "descriptor" if kind.startswith("tensordesc") else "pointer" if kind.startswith("*") else "scalar"
        argument = _argument(recording, launch["kernel"], name, value, as_what)
        if argument is None:
            return
        arguments.append(argument)
    if stream != recording.stream:
        recording.problem(f"kernel {launch['kernel']} was launched on another CUDA stream than the caller's")
    launch.update(
        signature=dict(signature), constexprs=encoded,
        attrs=[[list(path), [list(a) for a in value]] for path, value in attrs.items()],
        options={k: getattr(options, k) for k in COMPILE_OPTIONS if hasattr(options, k)},
        target={"backend": target.backend, "arch": target.arch, "warp_size": target.warp_size},
        grid=grid, arguments=arguments,
        ttgir_digest=ttgir_digest(kernel.asm["ttgir"]) if kernel is not None else None,
    )
    recording.launches.append(launch)


def _describe_descriptor(recording: _Recording, value: Any, name: str, kernel: str) -> tuple[dict[str, Any] | None,
                                                                                         str]:
    """A tensor-descriptor argument as plan data, or the problem that makes it unreplayable."""
    if not descriptors.is_descriptor(value):
        return None, (f"argument {name} of kernel {kernel} is a kind of tensor descriptor the judge cannot replay "
                      "(use triton.tools.tensor_descriptor.TensorDescriptor)")
    entry, problem = descriptors.describe(value, recording.locate_in_buffer)
    return entry, "" if entry is not None else f"the tensor descriptor {name} of kernel {kernel} {problem}"


def _check_descriptors(recording: _Recording | None, kernel: str, names: list[str], args: tuple, kwargs: dict) -> None:
    """Before a launch: refuse (and do not run) one whose tensor descriptor reaches outside its memory.

    While a call is recorded that memory is the input or allocation the descriptor points into; at
    any other time (a warm-up call, the notebook's own runs) it is the storage of the tensor the
    descriptor was made from. Out of it, TMA would write over other memory, and the interpreter over
    the host's heap.
    """
    for name, value in [*zip(names, args, strict=False), *kwargs.items()]:
        if not descriptors.is_descriptor(value):
            continue
        if recording is not None:
            entry, problem = _describe_descriptor(recording, value, name, kernel)
            if entry is None:
                recording.problem(problem)
                raise RuntimeError(f"not launched: {problem}")
            continue
        storage = value.base.untyped_storage() if hasattr(value.base, "untyped_storage") else None
        if storage is None:
            continue

        def own_storage(address: int, storage: Any = storage) -> tuple[dict[str, Any], int]:
            return {"buffer": "storage", "offset": address - storage.data_ptr()}, storage.nbytes()

        entry, problem = descriptors.describe(value, own_storage)
        if entry is None:
            raise RuntimeError(f"not launched: the tensor descriptor {name} of kernel {kernel} {problem}")


def _argument(recording: _Recording, kernel: str, name: str, value: Any, as_what: str) -> dict[str, Any] | None:
    """One non-constexpr argument of a launch as the judge replays it (``as_what``: "descriptor", "pointer" or
    "scalar"), or None after noting why it cannot be."""
    if as_what == "descriptor":
        entry, problem = _describe_descriptor(recording, value, name, kernel)
        if entry is None:
            recording.problem(problem)
            return None
        return {"name": name, "descriptor": entry}
    if as_what == "pointer":
        where = recording.locate(value.data_ptr() if hasattr(value, "data_ptr") else int(value))
        if where is None:
            recording.problem(f"argument {name} of kernel {kernel} points to memory that is neither "
                              "an input nor allocated in the call")
            return None
        return {"name": name, "pointer": where}
    tagged = encode_value(value)
    if tagged is None:
        recording.problem(f"argument {name} of kernel {kernel} has type {type(value).__name__}")
        return None
    return {"name": name, "scalar": tagged}


def _interpreted_constexprs(fn: Any) -> set[str]:
    """The parameters the interpreter passes unconverted: those annotated ``tl.constexpr``."""
    from triton.runtime.jit import _normalize_ty

    return {name for name, ty in fn.__annotations__.items() if _normalize_ty(ty) == "constexpr"}


def _record_interpreted(fn: Any, args: tuple, kwargs: dict) -> dict[str, Any] | None:
    """One interpreter launch (CPU) in the compiled launches' form, less what only a compiler knows: each
    parameter's kind (``signature``), the constexprs, and each argument (where a tensor points, a scalar's
    value). Returns the launch, its grid still to be filled in, or None after noting a problem."""
    import inspect

    import triton.language as tl
    from triton.runtime.jit import mangle_type

    recording = _current()
    kernel = fn.__name__
    try:
        bound = inspect.signature(fn.fn).bind(*args, **{k: v for k, v in kwargs.items() if k in fn.arg_names})
    except TypeError as error:
        recording.problem(f"kernel {kernel} was called with arguments it does not take: {error}")
        return None
    bound.apply_defaults()
    annotated = _interpreted_constexprs(fn.fn)
    signature, constexprs, arguments = {}, [], []
    for index, (name, value) in enumerate(bound.arguments.items()):
        try:
            kind = "constexpr" if name in annotated else mangle_type(value)
        except (TypeError, ValueError, KeyError, AttributeError):
            kind = ""  # of no type Triton knows: refused below as a scalar
        signature[name] = kind
        if kind == "constexpr":
            tagged = encode_value(value.value if isinstance(value, tl.constexpr) else value)
            if tagged is None:
                recording.problem(f"constexpr {name} of kernel {kernel} has type {type(value).__name__}")
                return None
            constexprs.append([[index], tagged])
        else:
            as_what = ("descriptor" if descriptors.is_descriptor(value) else
                       "pointer" if isinstance(value, torch.Tensor) else "scalar")
            argument = _argument(recording, kernel, name, value, as_what)
            if argument is None:
                return None
            arguments.append(argument)
    # attrs, options and target: what a compiled launch of the same call would record for NOMINAL_TARGET, so
    # the builder can compile it there (no divisibility is assumed).
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if type(kwargs.get(k)) is int}
    launch = {"kernel": kernel, "interpreted": True, "signature": signature, "constexprs": constexprs,
              "attrs": [], "options": options, "target": dict(NOMINAL_TARGET), "arguments": arguments, "grid": None}
    recording.launches.append(launch)
    return launch


def _grid_of(grid: Any) -> list[int]:
    """A grid as three plain ints (what the interpreter iterates over)."""
    return [int(g) for g in (*grid, 1, 1)[:3]]


def _recording_launches(original: Callable[..., Any], record: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (a Triton ``run``) as it runs outside a recording, and through ``record`` inside one; tensor
    descriptors are checked before every launch either way."""

    def run(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> Any:
        recording = _current()
        if recording is None or warmup:
            if not warmup:
                _check_descriptors(None, self.fn.__name__, self.arg_names, args, kwargs)
            return original(self, *args, grid=grid, warmup=warmup, **kwargs)
        _check_descriptors(recording, self.fn.__name__, self.arg_names, args, kwargs)
        recording.in_launch += 1
        try:
            return record(self, recording, args, kwargs, grid)
        finally:
            recording.in_launch -= 1

    return run


_installed = False


def install() -> None:
    """Wrap Triton's launch entry points once: they record only while ``record_call`` runs, and check
    tensor descriptors before every launch."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter, jit

    compiled_run = jit.JITFunction.run
    interpreted_run = interpreter.InterpretedFunction.run

    def record_compiled(self: Any, recording: _Recording, args: tuple, kwargs: dict, grid: Any) -> Any:
        # Only a GPU call has a stream to compare; on a CPU a compiled (non-interpreted) kernel has no driver,
        # and its launch below fails with the guard's message rather than here.
        stream = None
        if recording.stream is not None:
            from triton.runtime.driver import driver

            stream = driver.active.get_current_stream(driver.active.get_current_device())
        kernel = compiled_run(self, *args, grid=grid, warmup=False, **kwargs)
        if hasattr(kernel, "result"):
            kernel = kernel.result()
        _record_launch(self, args, kwargs, grid, kernel, stream)
        return kernel

    def record_interpreted(self: Any, recording: _Recording, args: tuple, kwargs: dict, grid: Any) -> Any:
        launch = _record_interpreted(self, args, kwargs)
        if launch is None:
            return interpreted_run(self, *args, grid=grid, warmup=False, **kwargs)

        def resolved(meta: dict[str, Any]) -> Any:  # the grid the interpreter runs, as the judge replays it
            chosen = grid(meta) if callable(grid) else grid
            launch["grid"] = _grid_of(chosen)
            return chosen

        return interpreted_run(self, *args, grid=resolved, warmup=False, **kwargs)

    jit.JITFunction.run = _recording_launches(compiled_run, record_compiled)
    interpreter.InterpretedFunction.run = _recording_launches(interpreted_run, record_interpreted)
    _installed = True


def _on_gpu(inputs: tuple[Any, ...]) -> bool:
    return any(isinstance(value, torch.Tensor) and value.is_cuda for value in inputs)


@contextmanager
def _recording(inputs: tuple[Any, ...]) -> Iterator[_Recording]:
    buffers = []
    for i, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            base, nbytes = _storage(value)
            buffers.append(_Buffer(f"in{i}", base, nbytes, {}))
    recording = _Recording(buffers, poison=not _on_gpu(inputs))
    if _on_gpu(inputs):
        from triton.runtime.driver import driver

        recording.stream = driver.active.get_current_stream(driver.active.get_current_device())
    _state.recording = recording
    try:
        with _WatchOps():
            yield recording
    finally:
        _state.recording = None


def _describe_output(recording: _Recording, out: Any) -> dict[str, Any] | None:
    if type(out) is not torch.Tensor:
        recording.problem(f"the graded function returned {type(out).__name__}, not a plain torch.Tensor")
        return None
    where = recording.locate(out.data_ptr()) if out.numel() else None
    base_where = recording.locate(_storage(out)[0])
    if base_where is None or where is None:
        recording.problem("the returned tensor was not allocated inside the call through torch "
                          "(it was made elsewhere, e.g. by NumPy, a library, or before the call)")
        return None
    if base_where["buffer"].startswith("in"):
        recording.problem("the returned tensor is (a view of) an input, not memory the call allocated")
        return None
    return {"buffer": base_where["buffer"], "offset": out.storage_offset() * out.element_size(),
            "shape": list(out.shape), "stride": list(out.stride()), "dtype": str(out.dtype).removeprefix("torch.")}


def snapshot_inputs(inputs: tuple[Any, ...]) -> list[torch.Tensor | None]:
    """Copies of the tensor inputs (None for other inputs), to tell afterwards whether a call wrote to them."""
    return [value.detach().clone() if isinstance(value, torch.Tensor) else None for value in inputs]


def changed_inputs(before: Sequence[Any], inputs: tuple[Any, ...]) -> list[int]:
    """Positions of tensor inputs that differ from what they were (``before``: copies, or the same inputs made
    afresh from their seed); NaN equals NaN at the same place, and non-tensor inputs are skipped."""
    changed = []
    for i, (old, new) in enumerate(zip(before, inputs, strict=True)):
        if not isinstance(old, torch.Tensor):
            continue
        same = old.shape == new.shape and old.dtype == new.dtype
        if same and (old.is_floating_point() or old.is_complex()):
            same = bool(((old == new) | (old.isnan() & new.isnan())).all())
        elif same:
            same = torch.equal(old, new)
        if not same:
            changed.append(i)
    return changed


def record_call(fn: Callable[..., Any], inputs: tuple[Any, ...]) -> tuple[Any, dict[str, Any]]:
    """Call ``fn(*inputs)`` once and return its output with the plan of what it did.

    Tensor inputs are buffers the judge supplies afresh; any other input (a scalar such as SAXPY's
    alpha) is replayed as recorded, so a spec makes such inputs from the shape, never from the seed.
    """
    install()
    before = snapshot_inputs(inputs)
    with _recording(inputs) as recording:
        try:
            out = fn(*inputs)
            if _on_gpu(inputs):
                torch.cuda.synchronize()
        except Exception as error:  # a student's function may raise anything; it is reported as data
            recording.problem(f"the graded function raised {type(error).__name__}: {str(error)[:300]}")
            out = None
    changed = changed_inputs(before, inputs)
    if changed:
        recording.problem(f"the graded function changed its input {changed[0]}: inputs are read-only")
    plan: dict[str, Any] = {"version": PLAN_VERSION, "problems": recording.problems,
                            "inputs": describe_inputs(inputs),
                            "allocations": [{"name": b.name, **b.info} for b in recording.allocations],
                            "launches": recording.launches, "output": None}
    if out is not None:
        plan["output"] = _describe_output(recording, out)
    if not recording.launches and not recording.problems:
        recording.problem("no Triton or CUDA kernel was launched by the graded function")
    return out, plan
