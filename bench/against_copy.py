"""Kernels that move a matrix, each timed beside torch's copy of it in the same rounds: the ratio the transpose
exercises are graded on, for the studies of Week 2 Days 2 and 3 (``bench/transpose_odd_w2d2.py``,
``bench/transpose_odd_w2d3.py``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from bench import harness
from course import bench
from course.spec import geometric_mean

# (name, fn(x, out=None) -> out, whether it transposes)
Variant = tuple[str, Callable, bool]


def parser(doc: str) -> argparse.ArgumentParser:
    """A transpose study's command line: ``--json``, ``--ncu`` and ``--all``."""
    p = harness.parser(doc)
    p.add_argument("--ncu", action="store_true", help="launch each variant once at the odd shape, then exit")
    p.add_argument("--all", action="store_true", help="also the earlier runs' other variants (and limits)")
    return p


def torch_transpose(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch's own transpose, written into ``out`` where given."""
    if out is None:
        return x.t().contiguous()
    return out.copy_(x.t())


def exact(fn: Callable, is_transpose: bool, x: torch.Tensor) -> bool:
    """Whether ``fn`` writes every element of its (NaN-filled) output, each equal to the input's."""
    shape = (x.shape[1], x.shape[0]) if is_transpose else tuple(x.shape)
    out = torch.full(shape, float("nan"), device=x.device)
    fn(x, out)
    return bool(torch.equal(out, x.t() if is_transpose else x))


def ncu_launches(functions: Sequence[Variant], x: torch.Tensor) -> None:
    """One launch of each variant and of torch's copy, named, for Nsight Compute to profile."""
    for name, fn, _ in functions:
        fn(x)  # Triton compiles before launching
        torch.cuda.synchronize()
        print(f"ncu launch: {name}", flush=True)
    x.clone()
    torch.cuda.synchronize()
    print("ncu launch: torch copy (clone)", flush=True)


def study(functions: Sequence[Variant], shapes: Sequence[tuple[int, int]], check_shapes: Sequence[tuple[int, int]],
          device_name: str, json_path: Path | None, broken: dict[str, str], width: int) -> None:
    """Check each variant on ``check_shapes``, time the exact ones beside the copy at each of ``shapes``, print the
    GB/s and ratio table and write the JSON. ``broken`` holds the variants already known not to build."""
    torch.manual_seed(0)
    for name, fn, is_t in functions:
        try:
            for shape in check_shapes:
                if not exact(fn, is_t, torch.randn(shape, device="cuda")):
                    broken[name] = f"wrong at {shape}"
                    break
        except Exception as error:  # a variant that does not compile here is reported, the rest go on
            broken[name] = f"{type(error).__name__}: {error}"[:300]
    live = [(name, fn, is_t) for name, fn, is_t in functions if name not in broken]
    ratios: dict[str, dict[str, float]] = {name: {} for name, _, _ in live}
    rates: dict[str, dict[str, float]] = {name: {} for name, _, _ in live}
    rates["torch copy"] = {}
    for shape in shapes:
        key = "x".join(map(str, shape))
        x = torch.randn(shape, device="cuda")
        for name, fn, is_t in live:
            if not exact(fn, is_t, x):
                broken[name] = f"wrong at {shape}"
        timings = bench.time_interleaved([bench.Timed(fn, args=(x,)) for _, fn, _ in live]
                                         + [bench.Timed(torch.Tensor.clone, args=(x,))])
        nbytes = 2 * x.numel() * x.element_size()
        copy_ms = timings[-1].median_ms
        rates["torch copy"][key] = bench.gbps(nbytes, copy_ms)
        for (name, _, _), timing in zip(live, timings[:-1], strict=True):
            ratios[name][key] = copy_ms / timing.median_ms
            rates[name][key] = bench.gbps(nbytes, timing.median_ms)
        del x
    keys = ["x".join(map(str, s)) for s in shapes]
    column = 20  # a rate (11) and a ratio (9)
    print(f"{device_name}: GB/s (read + written) and ratio to torch's copy of the same matrix, same rounds")
    print(f"{'variant':<{width}}" + "".join(f"{k:>{column}}" for k in keys) + f"{'geomean':>9}")
    print(f"{'torch copy':<{width}}" + "".join(f"{rates['torch copy'][k]:>{column - 9}.0f}{'':>9}" for k in keys))
    for name, values in ratios.items():
        flag = "  WRONG" if name in broken else ""
        print(f"{name:<{width}}" + "".join(f"{rates[name][k]:>{column - 9}.0f}{values[k]:>9.3f}" for k in keys)
              + f"{geometric_mean([values[k] for k in keys]):>9.3f}{flag}")
    for name, why in broken.items():
        print(f"not exact or not built: {name}: {why}")
    harness.write_json(json_path, {"device": device_name, "ratios": ratios, "gbps": rates, "broken": broken})
