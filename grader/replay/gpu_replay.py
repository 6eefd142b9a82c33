"""Replay a recorded launch plan on the judge's own buffers, with nothing of the student's Python.

A plan (``course.recorder.plan``) is untrusted JSON. ``prepare`` checks it against bounds before anything
runs (known kernels from the course's own build, grid sizes, buffer sizes and offsets, each argument
of the kind its kernel's signature says, tensor descriptors and the output view inside their
buffers), allocates its buffers (uninitialised ones filled with NaN) and any global scratch, and
resolves every argument; ``launch`` then only launches the kernels, so it can be timed alone. A
CUDA C launch (``course.cuda``) replays the module the builder compiled from the notebook's source
constant, with the same checks and CUDA's own limits on the grid, the block and shared memory.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from course import cuda
from course.recorder.plan_format import ttgir_digest
from grader.kernel_build import build_cuda
from grader.kernel_build.build_kernels import launch_key
from grader.kernel_build.built_index import built_ttgir, compile_error, compiled_errors
from grader.replay import tma_replay
from grader.replay.plan_checks import (
    MAX_PROGRAMS,
    Unreplayable,
    check_grid,
    check_plan,
    locate,
    output_placement,
    resolve_arguments,
)

DTYPES = {name: getattr(torch, name) for name in ("float16", "bfloat16", "float32", "float64", "int8", "int16",
                                                  "int32", "int64", "uint8", "bool")}


@dataclass
class Kernels:
    """The course-built kernels of one notebook: launch key -> compiled kernel or why not."""

    compiled: dict[str, Any]
    digests: dict[str, str]
    errors: dict[str, str]
    # launch key -> layout of each tensor-descriptor parameter, in order (grader.replay.tma_replay.adapt)
    descriptors: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    functions: dict[tuple[str, str], cuda.Function] = field(default_factory=dict)  # CUDA: (key, name) -> kernel
    ttgir: dict[str, str] = field(default_factory=dict)  # launch key -> the TTGIR compiled (ir_rules reads it)
    loaded: list[str] = field(default_factory=list)  # launch keys found compiled in Triton's cache
    compiled_here: list[str] = field(default_factory=list)  # launch keys the judge had to compile (cache misses)


@contextmanager
def _counted_cache(cache: Path | None) -> Iterator[list[bool]]:
    """Triton's cache folder set to ``cache`` (unless None) for a while; yields the list of each compile's
    ``cache_hit`` (Triton's compilation listener)."""
    from triton import knobs

    hits: list[bool] = []
    with knobs.compilation.scope(), knobs.cache.scope():
        knobs.compilation.listener = lambda **compiled: hits.append(compiled["cache_hit"])
        if cache is not None:
            knobs.cache.dir = str(cache)
        yield hits


def _load_cuda(kernels: Kernels, key: str, entry: dict[str, Any], file: Path) -> None:
    try:
        kernels.compiled[key] = cuda.load_image(file.read_bytes())
        kernels.digests[key] = str(entry["source_sha256"])
    except Exception as error:  # a module the driver refuses is reported, not raised
        kernels.errors[key] = f"the judge could not load a CUDA module: {error}"[:500]


def _load_triton(kernels: Kernels, key: str, entry: dict[str, Any], file: Path, text: str, target: Any,
                 hits: list[bool]) -> None:
    from course.compiler import compile_triton

    try:
        compiled = compile_triton(str(file), target)
        (kernels.loaded if hits.pop() else kernels.compiled_here).append(key)
        kernels.descriptors[key] = tma_replay.adapt(compiled, str(file))
        kernels.compiled[key] = compiled
        kernels.digests[key] = ttgir_digest(text)
        kernels.ttgir[key] = text
    except tma_replay.DescriptorError as error:
        kernels.errors[key] = f"the judge cannot replay kernel {entry.get('kernel')}: {error}"
    except Exception as error:  # a TTGIR the compiler refuses is reported, not raised
        kernels.errors[key] = compile_error(entry.get("kernel"), error)


def load_kernels(built: Path, target: Any = None, cache: Path | None = None) -> Kernels:
    """The builder's kernels for this GPU, from the Triton cache that ``grader.kernel_build.compile_ttgir`` filled for
    it.

    Each TTGIR file is handed to Triton's compiler as before (IR text: no Python of the notebook); with the
    same text, target and options as the compile stage's, that finds its cached binary and compiles nothing
    (``Kernels.loaded``). A kernel missing from the cache is compiled here (``Kernels.compiled_here``), and a
    compile error the stage recorded is reported without compiling again. ``target`` (a ``GPUTarget``) is the
    current GPU's unless given (tests compile for sm_90 without one); ``cache`` is Triton's cache folder
    (TRITON_CACHE_DIR) unless given.
    """
    kernels = Kernels({}, {}, {})
    index_file = built / "index.json"
    index = json.loads(index_file.read_text(encoding="utf-8")) if index_file.exists() else {}
    recorded = compiled_errors(built)
    with _counted_cache(cache) as hits:
        for key, entry in index.items():
            if "error" in entry:
                kernels.errors[key] = str(entry["error"])
                continue
            file = built / Path(str(entry["file"])).name
            if entry.get("cuda"):
                _load_cuda(kernels, key, entry, file)
                continue
            try:
                text = built_ttgir(built, entry)
            except ValueError as error:
                kernels.errors[key] = str(error)
                continue
            if key in recorded:
                kernels.errors[key] = recorded[key]
            else:
                _load_triton(kernels, key, entry, file, text, target, hits)
    return kernels


@dataclass
class Prepared:
    inputs: tuple[Any, ...]
    buffers: dict[str, torch.Tensor]
    # (compiled kernel or CUDA replay, grid, arguments, its global scratch or None)
    launches: list[tuple[Any, tuple[int, int, int], list[Any], torch.Tensor | None]]
    output: torch.Tensor


def _allocate(entry: dict[str, Any], device: str) -> torch.Tensor:
    dtype = DTYPES.get(str(entry.get("dtype")))
    if dtype is None:
        raise Unreplayable(f"an allocation of dtype {entry.get('dtype')!r} is not supported")
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = -(-int(entry["nbytes"]) // itemsize)
    init = entry.get("init")
    if init == "zeros":
        return torch.zeros(count, dtype=dtype, device=device)
    if init == "full" and isinstance(entry.get("value"), int | float):
        return torch.full((count,), entry["value"], dtype=dtype, device=device)
    buffer = torch.empty(count, dtype=dtype, device=device)
    return buffer.fill_(float("nan") if dtype.is_floating_point else -1)


def allocate(plan: dict[str, Any], inputs: tuple[Any, ...], device: str) -> dict[str, torch.Tensor]:
    """The buffers a checked plan names: the inputs (in0, in1...) and its allocations, made on ``device``."""
    buffers: dict[str, torch.Tensor] = {f"in{i}": t for i, t in enumerate(inputs) if isinstance(t, torch.Tensor)}
    for entry in plan.get("allocations") or []:
        buffers[entry["name"]] = _allocate(entry, device)
    return buffers


def _pointer(buffers: dict[str, torch.Tensor], where: Any) -> int:
    buffer, offset = locate(buffers, where)
    return buffer.untyped_storage().data_ptr() + offset  # offsets count from the storage, as recorded


def output_view(buffers: dict[str, torch.Tensor], description: Any, dtype: torch.dtype,
                shape: tuple[int, ...]) -> torch.Tensor:
    buffer, offset, stride = output_placement(buffers, description, dtype, shape)
    raw = buffer.view(torch.uint8) if buffer.dtype != torch.uint8 else buffer
    return torch.as_strided(raw.view(dtype), shape, stride, offset)


def prepare(plan: Any, inputs: tuple[Any, ...], kernels: Kernels, output_dtype: torch.dtype,
            output_shape: tuple[int, ...], max_bytes: int) -> Prepared:
    """Check ``plan`` and set up one replay of it on ``inputs``; raises Unreplayable with the reason."""
    launches = check_plan(plan, inputs, max_bytes)
    buffers = allocate(plan, inputs, "cuda")
    resolved = []
    scratch_total = 0
    for launch in launches:
        if "cuda" in launch:
            resolved.append((*_cuda_launch(launch, kernels, buffers), None))
            continue
        key = launch_key(launch)
        name = launch.get("kernel")
        if key in kernels.errors:
            raise Unreplayable(kernels.errors[key])
        if key not in kernels.compiled:
            raise Unreplayable(f"kernel {name} was not built from the notebook's source")
        if launch.get("ttgir_digest") != kernels.digests[key]:
            raise Unreplayable(f"kernel {name} as launched differs from the notebook's definition of it")
        grid = check_grid(name, launch.get("grid"))
        compiled = kernels.compiled[key]
        arguments = _arguments(launch, buffers, kernels.descriptors.get(key, []))
        if len(arguments) != len(compiled.src.signature):
            raise Unreplayable(f"kernel {name} was given {len(arguments)} arguments for its "
                               f"{len(compiled.src.signature)} parameters")
        if getattr(compiled.metadata, "profile_scratch_size", 0):
            raise Unreplayable(f"kernel {name} was compiled with profiling instrumentation")
        scratch, needed = None, tma_replay.scratch_bytes(compiled, grid)
        if needed:
            scratch_total += needed
            if scratch_total > min(tma_replay.MAX_SCRATCH_BYTES, max_bytes):
                limit_mib = tma_replay.MAX_SCRATCH_BYTES / 2**20
                raise Unreplayable(f"the call's kernels ask for more than {limit_mib:.0f} MiB of global scratch")
            scratch = torch.empty(needed, dtype=torch.uint8, device="cuda")
        resolved.append((compiled, grid, arguments, scratch))
    output = output_view(buffers, plan.get("output"), output_dtype, output_shape)
    return Prepared(inputs, buffers, resolved, output)


def _arguments(launch: dict[str, Any], buffers: dict[str, torch.Tensor], layouts: list[dict[str, Any]]) -> list[Any]:
    """Each recorded argument resolved on the judge's GPU buffers: addresses, descriptors as their build takes them."""
    signature = launch.get("signature")
    if layouts and (not isinstance(signature, dict)
                    or len(layouts) != sum(str(kind).startswith("tensordesc") for kind in signature.values())):
        raise Unreplayable(f"the arguments of kernel {launch.get('kernel')} do not match its signature")
    # No layouts: the build has no TMA parameters, and a descriptor (if any) takes its pointer form.
    layout = iter(layouts) if layouts else itertools.repeat(None)
    return resolve_arguments(launch, lambda kind, where: [_pointer(buffers, where)],
                             lambda kind, entry: tma_replay.descriptor_arguments(buffers, entry, kind, next(layout)))


def _cuda_launch(launch: dict[str, Any], kernels: Kernels, buffers: dict[str, torch.Tensor]) -> tuple[Any, ...]:
    """One CUDA C launch, checked and resolved: (replay, grid, [packed arguments])."""
    name = launch.get("kernel")
    if not isinstance(name, str) or not name.isidentifier():
        raise Unreplayable(f"a CUDA launch names no kernel: {str(name)[:60]}")
    key = build_cuda.launch_key(launch)
    if key in kernels.errors:
        raise Unreplayable(kernels.errors[key])
    if key not in kernels.compiled:
        raise Unreplayable(f"CUDA kernel {name} was not built from the notebook's source")
    if launch["cuda"].get("source_sha256") != kernels.digests[key]:
        raise Unreplayable(f"CUDA kernel {name} as launched differs from the notebook's source")
    grid, block, shared_mem = launch.get("grid"), launch.get("block"), launch.get("shared_mem")
    problem = cuda.launch_problem(grid, block, shared_mem, cuda.max_shared_bytes())
    if problem:
        raise Unreplayable(f"CUDA kernel {name}: {problem}")
    grid, block = cuda.dims(grid, "grid"), cuda.dims(block, "block")
    if grid[0] * grid[1] * grid[2] > MAX_PROGRAMS:
        raise Unreplayable(f"CUDA kernel {name} has a grid of {grid} blocks, outside the judge's bounds")
    if (key, name) not in kernels.functions:
        try:
            kernels.functions[(key, name)] = cuda.Function.find(kernels.compiled[key], name)
        except KeyError as error:
            raise Unreplayable(f"CUDA kernel {name}: {error.args[0]}") from None
    arguments: list[tuple[str, int | float]] = []
    for argument in launch.get("arguments") or []:
        if isinstance(argument, dict) and "pointer" in argument:
            arguments.append(("pointer", _pointer(buffers, argument["pointer"])))
        else:
            try:
                arguments.append(cuda.decode_scalar((argument or {}).get("scalar") if isinstance(argument, dict)
                                                    else None))
            except ValueError as error:
                raise Unreplayable(f"CUDA kernel {name}: {error}") from None
    replay = cuda.Replay(kernels.functions[(key, name)], block, int(shared_mem))
    return replay, grid, [cuda.pack(arguments)]


def launch(prepared: Prepared) -> torch.Tensor:
    """Launch the prepared kernels in order on the current stream; returns the output view."""
    from triton.runtime import _allocation

    for kernel, grid, arguments, scratch in prepared.launches:
        if scratch is None:
            kernel[grid](*arguments)
            continue
        token = _allocation._allocator.set(tma_replay.Scratch(scratch))
        try:
            kernel[grid](*arguments)
        finally:
            _allocation._allocator.reset(token)
    return prepared.output
