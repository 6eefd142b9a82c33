"""Week 1 Day 7's fp32 matmul: a dozen bounded variants beside cuBLAS fp32 SGEMM, timed by
``course.bench`` (L2 flushed, every entry and cuBLAS in the same rounds).

    python -m bench w1d7-fp32-dot-limit [--set main|async] [--json FILE] [--sass FILE]
    python -m bench w1d7-fp32-dot-limit --warm I/N     (compile every N-th variant from the I-th into Triton's cache)

Several ``--warm`` processes side by side fill Triton's on-disk cache before the timed run, which then compiles
nothing.

For each variant: the ratio cuBLAS time / variant time at the spec's four GPU shapes, the variant's own time and
TFLOP/s, and (from the launch at 4096^3) registers, spills and the instruction mix of the SASS loop body (FFMA
share, LDS per FFMA). GPU only; on a CPU it says so and exits 0.
"""

from __future__ import annotations

import collections
import re
import subprocess
import tempfile
import time
from pathlib import Path

import torch
import triton

from bench import harness
from bench.harness import gpu_or_say_so, parser
from bench.w1d7_limit_kernels import dot_launcher, gluon_async_launcher, gluon_launcher
from course import bench
from course import spec as specs
from course.spec import geometric_mean

REPO = Path(__file__).resolve().parent.parent


# name -> (launcher, what it tests). The first is the course's reference launch, the second the sweep's best.
VARIANTS = {
    "ref 64x64x32 w4 s3": (dot_launcher(64, 64, 32, 4, 3, 1), "the course's reference launch"),
    "best 64x128x32 w8 s3": (dot_launcher(64, 128, 32, 8, 3), "the sweep's best launch"),
    "best +evenK": (dot_launcher(64, 128, 32, 8, 3, even_k=True), "no load masks where K % BLOCK_K == 0"),
    "best +evenK unroll2": (dot_launcher(64, 128, 32, 8, 3, even_k=True, unroll=2), "tl.range loop_unroll_factor=2"),
    "64x128x16 w8 s4 evenK": (dot_launcher(64, 128, 16, 8, 4, even_k=True), "BLOCK_K 16 (tl.dot needs K >= 16)"),
    "128x128x32 w8 s3 evenK nreg128": (dot_launcher(128, 128, 32, 8, 3, even_k=True, maxnreg=128),
                                       "64 outputs a thread, registers capped for 2 programs an SM"),
    "128x128x16 w4 s3 evenK": (dot_launcher(128, 128, 16, 4, 3, even_k=True), "128 outputs a thread (4 warps)"),
    "persistent 64x128x32 w8 s3 evenK": (dot_launcher(64, 128, 32, 8, 3, even_k=True, persistent=2),
                                         "persistent grid, 2 programs an SM"),
    "gluon 64x128x32 w4 8x8/thr": (gluon_launcher(64, 128, 32, 2, 2, even_k=True),
                                   "Gluon dot_fma, 8x8 outputs a thread, A transposed in shared memory"),
    "gluon 64x128x32 w4 8x8/thr nreg168": (gluon_launcher(64, 128, 32, 2, 2, even_k=True, maxnreg=168),
                                           "the same, registers capped for 3 programs an SM"),
    "gluon 64x128x16 w4 8x8/thr": (gluon_launcher(64, 128, 16, 2, 2, even_k=True), "the same with BLOCK_K 16"),
    "gluon 128x128x16 w8 8x8/thr": (gluon_launcher(128, 128, 16, 4, 2, even_k=True), "8 warps, 128x128 tile"),
}
# The second device call: the hand-laid Gluon layouts fed by cp.async (bench/w1d7_limit_kernels.py), beside the
# reference and the best Triton-level launch again (same machine, same rounds).
ASYNC_VARIANTS = {
    "ref 64x64x32 w4 s3": VARIANTS["ref 64x64x32 w4 s3"],
    "best +evenK": VARIANTS["best +evenK"],
    "gluon-async 64x128x32 w4 s3 8x8/thr": (gluon_async_launcher(64, 128, 32, 2, 2, 3),
                                            "Gluon dot_fma 8x8 a thread, cp.async 3 buffers, A swizzled"),
    "gluon-async 64x128x16 w4 s4 8x8/thr": (gluon_async_launcher(64, 128, 16, 2, 2, 4),
                                            "the same, BLOCK_K 16, 4 buffers"),
    "gluon-async 128x128x32 w8 s3 8x8/thr": (gluon_async_launcher(128, 128, 32, 4, 2, 3), "8 warps, 128x128 tile"),
    "gluon-async 128x128x16 w4 s3 16x8/thr": (gluon_async_launcher(128, 128, 16, 2, 2, 3),
                                              "16x8 a thread (cuBLAS's 256x128 kernel holds 16x8 too)"),
    "gluon-async 128x128x32 w4 s3 16x8/thr": (gluon_async_launcher(128, 128, 32, 2, 2, 3), "the same, BLOCK_K 32"),
}
SETS = {"main": VARIANTS, "async": ASYNC_VARIANTS}


def loop_mix(sass: str) -> dict[str, float]:
    """Instruction mix of the longest backward-branch loop in ``sass`` (nvdisasm text): the K loop."""
    instructions, labels = [], {}
    for line in sass.splitlines():
        label = re.match(r"\s*\.?(L_x_\d+):", line)
        if label:
            labels[label.group(1)] = len(instructions)
            continue
        found = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*?);", line)
        if found:
            instructions.append(re.sub(r"^@!?U?P\w+\s+", "", found.group(1).strip()))
    best = None
    for i, text in enumerate(instructions):
        target = re.search(r"BRA\s+`\(\.(L_x_\d+)\)", text)
        if target and labels.get(target.group(1), i + 1) < i:
            lo = labels[target.group(1)]
            if best is None or i - lo > best[1] - best[0]:
                best = (lo, i)
    if best is None:
        return {}
    body = instructions[best[0]:best[1] + 1]
    ops = collections.Counter(text.split()[0].split(".")[0] for text in body)
    ffma = ops["FFMA"] or 1
    return {"loop_instructions": len(body), "ffma": ops["FFMA"], "ffma_share": ops["FFMA"] / len(body),
            "lds_per_ffma": ops["LDS"] / ffma, "sts": ops["STS"], "ldl_stl": ops["LDL"] + ops["STL"],
            "top": dict(ops.most_common(8))}


def kernel_facts(compiled) -> tuple[dict[str, object], str]:
    facts: dict[str, object] = {}
    for key in ("n_regs", "n_spills"):
        facts[key] = getattr(compiled, key, None)
    facts["shared_bytes"] = getattr(compiled.metadata, "shared", None)
    try:
        nvdisasm = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"
        with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
            cubin.write(compiled.asm["cubin"])
            cubin.flush()
            sass = subprocess.run([str(nvdisasm) if nvdisasm.exists() else "nvdisasm", "-c", cubin.name],
                                  capture_output=True, text=True, check=True).stdout
        facts.update(loop_mix(sass))
    except Exception as error:  # nvdisasm missing: the rest still stands
        facts["sass_error"] = f"{type(error).__name__}: {error}"[:200]
        sass = ""
    return facts, sass


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("--sass", type=Path, default=None, help="write each variant's SASS (4096^3 launch) here")
    p.add_argument("--warm", default=None, help="I/N: only compile (run once) every N-th variant from the I-th")
    p.add_argument("--set", choices=sorted(SETS), default="main", help="which variants (main: the first call's)")
    args = p.parse_args(argv)
    variants = SETS[args.set]
    info = gpu_or_say_so()
    if info is None:
        return 0
    if args.warm:
        first, step = map(int, args.warm.split("/"))
        spec = specs.get("w1d7.matmul_fp32")
        for shape in ((1024, 1024, 1024), (3000, 2000, 1500)):  # the two specialisations of the four shapes
            inputs = spec.make_inputs(shape, 1, "cuda")
            for name, (fn, _) in list(variants.items())[first::step]:
                try:
                    fn(*inputs)
                except Exception as error:
                    print(f"warm {name} at {shape}: {type(error).__name__}: {str(error)[:200]}")
        torch.cuda.synchronize()
        return 0
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    spec = specs.get("w1d7.matmul_fp32")
    shapes = list(spec.bench_shapes.gpu)
    keys = ["x".join(map(str, s)) for s in shapes]
    ratios: dict[str, dict[str, float]] = {name: {} for name in variants}
    times: dict[str, dict[str, float]] = {name: {} for name in [*variants, "cuBLAS"]}
    facts: dict[str, dict] = {}
    notes: list[str] = []
    sass_text: list[str] = []

    def emit() -> dict:
        tflops = {name: {k: spec.flops(s) / ms / 1e9 for k, s in zip(keys, shapes, strict=True) if (ms := t.get(k))}
                  for name, t in times.items()}
        result = {"device": info.name, "nvidia_smi": smi, "torch": torch.__version__,
                  "triton": triton.__version__, "shapes": keys,
                  "variants": {name: {"what": what, "ratio_vs_cublas": ratios[name], "ms": times[name],
                                      "tflops": tflops[name], "kernel_4096": facts.get(name, {})}
                               for name, (_, what) in variants.items()},
                  "cublas": {"ms": times["cuBLAS"], "tflops": tflops["cuBLAS"]}, "notes": notes}
        harness.write_json(args.json, result)
        return result

    for shape, key in zip(shapes, keys, strict=True):
        inputs = spec.make_inputs(shape, 1, "cuda")
        reference = spec.library(inputs)
        exact = inputs[0].double() @ inputs[1].double()
        usable = []
        for name, (fn, _) in variants.items():
            began = time.perf_counter()
            try:
                out = fn(*inputs)
                torch.cuda.synchronize()
            except Exception as error:  # a launch this GPU or compiler refuses: left out, named
                notes.append(f"{name} at {key}: {type(error).__name__}: {str(error)[:300]}")
                print(notes[-1])
                continue
            error = float(torch.linalg.vector_norm(out.double() - exact) / torch.linalg.vector_norm(exact))
            if not torch.allclose(out, reference, rtol=1e-3, atol=1e-2) or not error < 1e-5:
                notes.append(f"{name} at {key}: wrong (relative error {error:.2e})")
                print(notes[-1])
                continue
            print(f"{name} at {key}: ok, first call {time.perf_counter() - began:.1f} s, rel. error {error:.1e}")
            if key == "4096x4096x4096":
                facts[name], sass = kernel_facts(fn.compiled)
                facts[name]["relative_error"] = error
                sass_text.append(f"===== {name} =====\n{sass}")
            usable.append((name, fn))
        del exact
        timings = bench.time_interleaved([bench.Timed(fn, args=inputs) for _, fn in usable]
                                         + [bench.Timed(spec.library, args=(inputs,))])
        flops = spec.flops(shape)
        times["cuBLAS"][key] = timings[-1].median_ms
        for (name, _), timing in zip(usable, timings[:-1], strict=True):
            ratios[name][key] = timings[-1].median_ms / timing.median_ms
            times[name][key] = timing.median_ms
        print(f"{key}: cuBLAS {timings[-1].median_ms:.3f} ms = {flops / timings[-1].median_ms / 1e9:.1f} TFLOP/s")
        del inputs, reference
        emit()
    result = emit()
    if args.sass:
        args.sass.write_text("\n".join(sass_text), encoding="utf-8")
    tflops = {name: v["tflops"] for name, v in result["variants"].items()}
    tflops["cuBLAS"] = result["cublas"]["tflops"]
    print(f"{info.name} ({smi}): each variant's GFLOP/s over cuBLAS fp32's, same rounds; static SASS of its K loop")
    print(f"{'variant':<40}" + "".join(f"{k:>16}" for k in keys) + f"{'geomean':>9}{'regs':>6}{'FFMA%':>7}"
          f"{'LDS/FFMA':>9}")
    for name in variants:
        values = [ratios[name].get(k, float("nan")) for k in keys]
        f = facts.get(name, {})
        print(f"{name:<40}" + "".join(f"{v:>16.3f}" for v in values) + f"{geometric_mean(values):>9.3f}"
              f"{f.get('n_regs') or 0:>6}{100 * f.get('ffma_share', 0):>7.1f}{f.get('lds_per_ffma', 0):>9.3f}")
    print(f"{'cuBLAS TFLOP/s':<40}" + "".join(f"{tflops['cuBLAS'].get(k, 0):>16.1f}" for k in keys))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
