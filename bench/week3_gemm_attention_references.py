"""Week 3 Days 4 and 5: the reference kernels against their libraries, timed in the same rounds, on one GPU.

    python bench/week3_gemm_attention_references.py --json FILE [--commit SHA] [--budget-s 150]

Day 4 (``w3d4.linear_gelu``, gelu(A @ B + bias) in fp16): the solution notebook's autotuned kernel, the unfused
library path the grader times (cuBLAS fp16 GEMM with fp32 accumulation, then a bias kernel and a GELU kernel) and
``torch.compile`` of the same three calls (default mode: cuBLAS plus one generated bias+GELU kernel), on the spec's
benchmark shapes. Day 5 (``w3d5.attention_fp16`` and ``_bf16``): the notebook's autotuned FlashAttention forward
against ``scaled_dot_product_attention`` held to its flash backend, at the spec's benchmark shapes (N = 4096,
d = 64 and 128, causal and not), in fp16 (graded) and bf16 (measured only). TFLOP/s count 4 B H N^2 d, halved when
causal (the spec's ``flops``).

Every contender of a shape is timed in the same rounds by the course's harness (``course.bench.time_interleaved``:
L2 flushed, CUDA events, median), so a clock drift moves them alike; each output is checked first against the
spec's fp64 sample check. The kernels are the solution notebooks' own cells, loaded as a module. A section that
would start past ``--budget-s`` seconds is skipped and named as skipped in the JSON, which is written after each.
Needs a CUDA GPU, torch and triton; no grader wheels.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SOLUTIONS = REPO / "solutions" / "week3"
CELLS = {"day4_fused_epilogue": ("linear_gelu_kernel", "linear_gelu_launch"),
         "day5_flash_attention": ("attention_kernel", "attention_launch")}
PREAMBLE = """
import course
DEVICE = course.device.configure(DEVICE_MODE)
import math
import torch
import triton
import triton.language as tl
"""


def load_solution(stem: str, device_mode: str = "gpu") -> Any:
    """The solution notebook's kernel and launch cells as a module (Triton reads a kernel's source from a file)."""
    notebook = json.loads((SOLUTIONS / f"{stem}.ipynb").read_text(encoding="utf-8"))
    cells = {c["metadata"].get("nbgrader", {}).get("grade_id"): "".join(c["source"])
             for c in notebook["cells"] if c["cell_type"] == "code"}
    source = PREAMBLE.replace("DEVICE_MODE", repr(device_mode)) + "\n\n".join(cells[name] for name in CELLS[stem])
    file = Path(tempfile.mkdtemp(prefix="week3-bench-")) / f"{stem}_solution.py"
    file.write_text(source + "\n", encoding="utf-8")
    module_spec = importlib.util.spec_from_file_location(f"{stem}_solution", file)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def _checked(spec: Any, fn: Any, inputs: tuple) -> tuple[float | None, str | None]:
    """fn's relative error on the spec's sample check, and None if it passes, else why not."""
    try:
        error = spec.spot_error(inputs, fn(*inputs))
    except Exception as failure:  # a contender that cannot run this shape is reported, not fatal
        return None, f"{type(failure).__name__}: {str(failure)[:200]}"
    return error, None if error <= spec.tolerance else f"relative error {error:.2e} > {spec.tolerance:.0e}"


def time_shape(spec: Any, contenders: dict[str, Any], shape: tuple[int, ...], seed: int) -> dict[str, Any]:
    """Each contender's median time and rate on one shape, all timed in the same rounds."""
    from course import bench

    inputs = spec.make_inputs(shape, seed, "cuda")
    checked = {name: _checked(spec, fn, inputs) for name, fn in contenders.items()}
    problems = {name: problem for name, (_, problem) in checked.items()}
    live = {name: fn for name, fn in contenders.items() if problems[name] is None}
    timings = bench.time_interleaved([bench.Timed(fn, args=inputs) for fn in live.values()], drop_on=(Exception,),
                                     max_seconds=2.0)
    row: dict[str, Any] = {"shape": list(shape), "tflop": spec.flops(shape) / 1e12}
    for name, problem in problems.items():
        if problem is not None:
            row[name] = {"error": problem}
    for name, timing in zip(live, timings, strict=True):
        if isinstance(timing, Exception):
            row[name] = {"error": f"{type(timing).__name__}: {str(timing)[:200]}"}
        else:
            row[name] = {"ms": timing.median_ms, "spread": timing.spread, "repeats": timing.repeats,
                         "tflops": spec.flops(shape) / (timing.median_ms * 1e-3) / 1e12,
                         "sampled_rel_error": checked[name][0]}
    return row


def ratios(rows: list[dict[str, Any]], numerator: str, denominator: str) -> dict[str, float | None]:
    """Per-shape speed ratios numerator / denominator and their geometric mean (None where either failed)."""
    per_shape = [row[denominator]["ms"] / row[numerator]["ms"]
                 if "ms" in row.get(numerator, {}) and "ms" in row.get(denominator, {}) else None for row in rows]
    known = [r for r in per_shape if r]
    geomean = math.exp(sum(math.log(r) for r in known) / len(known)) if known and len(known) == len(rows) else None
    return {"per_shape": per_shape, "geomean": geomean}


def epilogue_section(report: dict[str, Any], with_compile: bool) -> None:
    import torch

    from course.spec import get

    spec = get("w3d4.linear_gelu")
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False  # torch.compile's GEMM as the library's
    solution = load_solution("day4_fused_epilogue")
    contenders: dict[str, Any] = {"reference": solution.linear_gelu,
                                  "cublas_separate": lambda a, b, bias: spec.library((a, b, bias))}
    if with_compile:
        contenders["torch_compile"] = torch.compile(
            lambda a, b, bias: torch.nn.functional.gelu(a @ b + bias, approximate="tanh"), dynamic=False)
    rows = []
    for i, shape in enumerate(spec.bench_shapes.gpu):
        rows.append(time_shape(spec, contenders, shape, seed=100 + i))
        rows[-1]["reference_config"] = str(getattr(solution.tuned_linear_gelu, "best_config", None))
    report["w3d4.linear_gelu"] = {
        "library": spec.library_name, "rows": rows,
        "reference_vs_library": ratios(rows, "reference", "cublas_separate"),
        "reference_vs_torch_compile": ratios(rows, "reference", "torch_compile") if with_compile else None,
        "torch_compile_vs_library": ratios(rows, "torch_compile", "cublas_separate") if with_compile else None}


def attention_section(report: dict[str, Any], spec_id: str) -> None:
    from course.spec import get

    spec = get(spec_id)
    fp16 = get("w3d5.attention_fp16")
    solution = load_solution("day5_flash_attention")
    contenders = {"reference": solution.attention,
                  "sdpa_flash": lambda q, k, v, causal: spec.library((q, k, v, causal))}
    rows = []
    for i, shape in enumerate(fp16.bench_shapes.gpu):  # bf16 has no benchmark shapes of its own: the same ones
        rows.append(time_shape(spec, contenders, shape, seed=200 + i))
        rows[-1]["reference_config"] = str(getattr(solution.tuned_attention, "best_config", None))
    report[spec_id] = {"library": spec.library_name, "rows": rows,
                       "reference_vs_library": ratios(rows, "reference", "sdpa_flash")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--commit", default=None, help="the commit measured (default: git rev-parse HEAD)")
    parser.add_argument("--budget-s", type=float, default=150.0, help="start no section after this many seconds")
    args = parser.parse_args()
    import torch
    import triton

    if not torch.cuda.is_available():
        print("no CUDA GPU: nothing measured")
        return 0
    commit = args.commit or subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                                           text=True).stdout.strip() or "unknown"
    report: dict[str, Any] = {
        "what": "Week 3 Days 4-5 reference kernels against their libraries, same rounds (course.bench)",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
        "commit": commit, "command": " ".join(["python", *sys.argv]),
        "torch": torch.__version__, "triton": triton.__version__, "skipped": []}
    began = time.perf_counter()
    sections = [("w3d5.attention_fp16", lambda: attention_section(report, "w3d5.attention_fp16")),
                ("w3d4.linear_gelu", lambda: epilogue_section(report, with_compile=True)),
                ("w3d5.attention_bf16", lambda: attention_section(report, "w3d5.attention_bf16"))]
    for name, run in sections:
        if time.perf_counter() - began > args.budget_s:
            report["skipped"].append(name)
            continue
        try:
            run()
        except Exception as failure:  # one section's failure is reported; the others still run
            report[name] = {"error": f"{type(failure).__name__}: {str(failure)[:500]}"}
        report["seconds"] = round(time.perf_counter() - began, 1)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
        print(json.dumps({name: report[name].get("reference_vs_library", report[name])}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
