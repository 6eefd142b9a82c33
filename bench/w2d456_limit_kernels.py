"""Kernels and launchers for the Week 2 Days 4-6 limit study (bench/w2d456_limit_variants.py, w2d456_limit_ncu.py).

Every variant stays inside its day's technique:

- Day 4 (software pipelining): the solution notebook's ``matmul_kernel`` (pointer loads, a 2-D grid, ``pid_m =
  program_id(0)``, which varies fastest: a wave goes down columns of tiles) with other tiles, warps and stages, and
  the same body in grouped tile order (``_grouped_kernel`` below: the notebook's kernel with Day 5's
  ``tile_coordinates`` in front);
- Day 5 (TMA descriptors): the solution notebook's ``matmul_tma_kernel`` (host-side ``TensorDescriptor``s, grouped
  order) with other tiles, warps and stages;
- Day 6 (tensor cores): the solution notebook's ``matmul_kernel`` (``tl.dot`` with an fp32 accumulator, the same
  2-D grid) with other tiles, warps and stages, fp16 and bf16; one informational row runs the grouped
  kernel (tile order is Day 4's/7's lever, not Day 6's).

The reference entries call the notebook's own graded wrapper (``matmul``, ``matmul_tma``, ``matmul_fp16`` /
``matmul_bf16``), read from the solution notebooks' JSON at run time, so what is timed is what the grader runs.
Their "twin" launchers launch the same kernel with the same constexprs and options (the same cached binary), which
gives the compiled kernel's registers and SASS. All kernels are ``@triton.jit`` and are launched normally.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import triton
import triton.language as tl

REPO = Path(__file__).resolve().parent.parent

# Per day: the solution notebook, the nbgrader cells that make up the graded code, and the lines the notebook's
# setup cell would have defined before them (DEVICE as configured by the caller, the imports, HAS_TMA).
NOTEBOOKS = {
    "w2d4": ("solutions/week2/day4_pipelining.ipynb", ("matmul_kernel",), ""),
    "w2d5": ("solutions/week2/day5_tma.ipynb",
             ("launch_config", "matmul_pointer_kernel", "matmul_tma_kernel", "matmul_tma_wrapper"),
             "from triton.tools.tensor_descriptor import TensorDescriptor\n"
             "HAS_TMA = DEVICE.has_gpu and torch.cuda.get_device_capability()[0] >= 9\n"),
    "w2d6": ("solutions/week2/day6_tensor_cores.ipynb", ("tiles", "matmul_kernel"), ""),
}
HEADER = ("import course\nimport torch\nimport triton\nimport triton.language as tl\n\n"
          "DEVICE = course.device.info()\n")
_modules: dict[str, Any] = {}


def notebook_source(day: str) -> str:
    path, cells, extra = NOTEBOOKS[day]
    nb = json.loads((REPO / path).read_text(encoding="utf-8"))
    found = {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"])
             for c in nb["cells"] if c["cell_type"] == "code"}
    missing = [name for name in cells if name not in found]
    if missing:
        raise KeyError(f"{path} has no cells {missing}")
    return HEADER + extra + "\n\n" + "\n\n\n".join(found[name] for name in cells) + "\n"


def notebook(day: str) -> Any:
    """The solution notebook's graded cells of ``day`` as a module (Triton reads kernels from a file). The file's
    place is fixed, so parallel warm-up processes and the timing process compile and find the same kernels."""
    if day in _modules:
        return _modules[day]
    source = notebook_source(day)
    folder = Path(tempfile.gettempdir()) / "w2d456_limit"
    folder.mkdir(exist_ok=True)
    path = folder / f"{day}_solution.py"
    if not path.exists() or path.read_text(encoding="utf-8") != source:
        scratch = folder / f".{day}_{os.getpid()}.py"
        scratch.write_text(source, encoding="utf-8")
        os.replace(scratch, path)
    name = f"w2d456_{day}_solution"
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    _modules[day] = module
    return module


@triton.jit
def _grouped_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """The Day 4 notebook's kernel body in grouped tile order (Day 5's tile_coordinates): a 1-D grid, GROUP_M rows of
    tiles walked column by column, so the programs resident at once share A and B panels in L2."""
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_here = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_here
    pid_n = (pid % per_group) // rows_here
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = cols < N
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c_ptrs = c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def _strides(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[int, ...]:
    return a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1)


@dataclass(frozen=True)
class Launch:
    """One launch configuration: the tile, warps, stages and (1-D grids) GROUP_M."""

    block_m: int
    block_n: int
    block_k: int
    warps: int
    stages: int
    group_m: int = 8

    def label(self, grouped: bool = False) -> str:
        order = f" G{self.group_m}" if grouped else ""
        return f"{self.block_m}x{self.block_n}x{self.block_k} w{self.warps} s{self.stages}{order}"

    def smem_bytes(self, element_bytes: int = 2) -> int:
        """Operand stages alone (Day 4's smem_bytes formula): stages * (BM*BK + BK*BN) * bytes."""
        return self.stages * (self.block_m * self.block_k + self.block_k * self.block_n) * element_bytes


def plain_launcher(day: str, cfg: Launch) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The Day 4 or Day 6 notebook's ``matmul_kernel`` on a 2-D grid (row-major tile order), as its wrapper launches
    it, with ``cfg``; C in the inputs' dtype (fp32 accumulator)."""
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        module = notebook(day)
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = (triton.cdiv(M, cfg.block_m), triton.cdiv(N, cfg.block_n))
        extra = {"INPUT_PRECISION": "ieee", "ACC_DTYPE": tl.float32} if day == "w2d6" else {}
        matmul.compiled = module.matmul_kernel[grid](
            a, b, c, M, N, K, *_strides(a, b, c), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            num_warps=cfg.warps, num_stages=cfg.stages, **extra)
        return c

    return matmul


def grouped_launcher(cfg: Launch) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """``_grouped_kernel`` (the Day 4 body in grouped order) with ``cfg``; C in the inputs' dtype."""
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=a.dtype)
        grid = (triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n),)
        matmul.compiled = _grouped_kernel[grid](
            a, b, c, M, N, K, *_strides(a, b, c), BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            GROUP_M=cfg.group_m, num_warps=cfg.warps, num_stages=cfg.stages)
        return c

    return matmul


def tma_launcher(cfg: Launch) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The Day 5 notebook's ``matmul_tma_kernel`` through host-side tensor descriptors (as its
    ``matmul_descriptors`` launches it) with ``cfg``. fp16 only, N and K multiples of 8 (every benchmark shape)."""
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        module = notebook("w2d5")
        M, K = a.shape
        N = b.shape[1]
        c = torch.empty((M, N), device=a.device, dtype=torch.float16)
        a_desc = module.TensorDescriptor.from_tensor(a, [cfg.block_m, cfg.block_k])
        b_desc = module.TensorDescriptor.from_tensor(b, [cfg.block_k, cfg.block_n])
        c_desc = module.TensorDescriptor.from_tensor(c, [cfg.block_m, cfg.block_n])
        grid = (triton.cdiv(M, cfg.block_m) * triton.cdiv(N, cfg.block_n),)
        matmul.compiled = module.matmul_tma_kernel[grid](
            a_desc, b_desc, c_desc, M, N, K, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
            GROUP_M=cfg.group_m, num_warps=cfg.warps, num_stages=cfg.stages)
        return c

    return matmul


def reference_call(day: str, dtype: torch.dtype = torch.float16) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    """The notebook's graded function itself."""
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        module = notebook(day)
        if day == "w2d4":
            return module.matmul(a, b)
        if day == "w2d5":
            return module.matmul_tma(a, b)
        return module.matmul_fp16(a, b) if dtype == torch.float16 else module.matmul_bf16(a, b)

    return matmul


def reference_launch(day: str) -> Launch:
    """The launch configuration the notebook's wrapper uses on a GPU, read from the notebook's own code."""
    module = notebook(day)
    if day == "w2d4":
        g = module.GPU_CONFIG
        return Launch(g["BLOCK_M"], g["BLOCK_N"], g["BLOCK_K"], g["num_warps"], g["num_stages"])
    if day == "w2d5":
        blocks, options = module.launch_config()
        return Launch(blocks["BLOCK_M"], blocks["BLOCK_N"], blocks["BLOCK_K"], options["num_warps"],
                      options["num_stages"], blocks["GROUP_M"])
    t = module.tiles_for(torch.float16, "ieee", interpreter=False)
    return Launch(t["BLOCK_M"], t["BLOCK_N"], t["BLOCK_K"], t["num_warps"], t["num_stages"])


@dataclass
class Variant:
    name: str
    fn: Callable[[torch.Tensor, torch.Tensor], Any]
    twin: Callable[[torch.Tensor, torch.Tensor], Any]  # the same binary, returning .compiled (registers, SASS)
    what: str
    in_technique: bool = True
    reference: bool = False


@dataclass
class Day:
    key: str  # the results' key
    spec_id: str
    notebook_day: str
    dtype: torch.dtype
    technique: str
    variants: list[Variant] = field(default_factory=list)


def _plain(day: str, cfg: Launch, what: str, **kw: Any) -> Variant:
    fn = plain_launcher(day, cfg)
    return Variant(f"{cfg.label()} row-major", fn, fn, what, **kw)


def _grouped(cfg: Launch, what: str, **kw: Any) -> Variant:
    fn = grouped_launcher(cfg)
    return Variant(f"{cfg.label(grouped=True)} grouped", fn, fn, what, **kw)


def _tma(cfg: Launch, what: str) -> Variant:
    fn = tma_launcher(cfg)
    return Variant(f"TMA {cfg.label(grouped=True)}", fn, fn, what)


def days() -> list[Day]:
    """The study's days with their variants; the first of each is the reference (the notebook's graded wrapper)."""
    out: list[Day] = []
    ref4 = reference_launch("w2d4")
    day4 = Day("w2d4", "w2d4.matmul_fp16", "w2d4", torch.float16,
               "software pipelining: pointer loads, cp.async stages; tiles, warps, stages, grouped order")
    day4.variants = [
        Variant(f"ref {ref4.label()} row-major", reference_call("w2d4"), plain_launcher("w2d4", ref4),
                "the notebook's matmul (GPU_CONFIG), as graded", reference=True),
        _plain("w2d4", Launch(128, 128, 64, 8, 5), "one more stage (the pipelining sweep's best stage count)"),
        _plain("w2d4", Launch(256, 128, 64, 8, 3), "taller tile in row-major order: half the A re-reads per wave"),
        _grouped(Launch(128, 128, 64, 8, 4), "the reference launch in grouped order (L2 reuse)"),
        _grouped(Launch(128, 256, 64, 8, 3), "wider tile, grouped: 64x256 wgmma per warp group"),
        _grouped(Launch(128, 256, 64, 8, 4), "the same with 4 stages (192 KiB of operand stages)"),
        _grouped(Launch(256, 128, 64, 8, 3), "taller tile, grouped"),
    ]
    ref5 = reference_launch("w2d5")
    day5 = Day("w2d5", "w2d5.matmul_tma", "w2d5", torch.float16,
               "TMA descriptors (host-side TensorDescriptor), grouped order; tiles, warps, stages")
    day5.variants = [
        Variant(f"ref TMA {ref5.label(grouped=True)}", reference_call("w2d5"), tma_launcher(ref5),
                "the notebook's matmul_tma (launch_config), as graded", reference=True),
        _tma(Launch(128, 128, 64, 8, 5), "one more stage"),
        _tma(Launch(128, 128, 64, 4, 4), "one warp group (4 warps) for the 128x128 tile"),
        _tma(Launch(128, 256, 64, 8, 3), "wider tile (Day 7's best TMA tile), 3 stages"),
        _tma(Launch(128, 256, 64, 8, 4), "wider tile, 4 stages (192 KiB; the C tile reuses the stage buffers)"),
        _tma(Launch(256, 128, 64, 8, 3), "taller tile, 3 stages"),
        _tma(Launch(128, 256, 32, 8, 5), "wider tile, BLOCK_K 32, 5 stages"),
        _tma(Launch(128, 128, 128, 8, 3), "deeper K step, 3 stages"),
    ]
    out += [day4, day5]
    ref6 = reference_launch("w2d6")
    for label, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        day6 = Day(f"w2d6_{label}", f"w2d6.matmul_{label}", "w2d6", dtype,
                   "tensor cores through tl.dot: tiles, warps, stages (the notebook's row-major 2-D grid)")
        day6.variants = [
            Variant(f"ref {ref6.label()} row-major", reference_call("w2d6", dtype), plain_launcher("w2d6", ref6),
                    f"the notebook's matmul_{label} (tiles_for), as graded", reference=True),
            _plain("w2d6", Launch(128, 128, 64, 8, 4), "one more stage"),
            _plain("w2d6", Launch(128, 128, 64, 4, 4), "one warp group (4 warps)"),
            _plain("w2d6", Launch(128, 256, 64, 8, 3), "wider tile: 64x256 wgmma per warp group"),
            _plain("w2d6", Launch(256, 128, 64, 8, 3), "taller tile: half the A re-reads per wave in this order"),
            _plain("w2d6", Launch(256, 128, 64, 8, 4), "taller tile, 4 stages"),
            _plain("w2d6", Launch(128, 256, 64, 8, 4), "wider tile, 4 stages"),
            _grouped(Launch(128, 256, 64, 8, 3), "informational: grouped order (Day 4/7's lever, not Day 6's)",
                     in_technique=False),
        ]
        out.append(day6)
    return out
