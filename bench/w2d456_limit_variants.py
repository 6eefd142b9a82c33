"""Week 2 Days 4, 5 and 6: each reference launch and a few variants inside its day's technique, timed beside the
spec's library baseline as the grader times them (course.bench.time_interleaved: L2 flushed, a spin queued, every
entry and the baseline in the same rounds; every timed output checked by Freivalds' test).

    python -m bench w2d456-limits [--days w2d4,w2d5,w2d6_fp16,w2d6_bf16] [--json FILE] [--sass FILE]
    python -m bench w2d456-limits --warm I/N     (compile every N-th (day, variant) from the I-th)
    python -m bench w2d456-limits --dry-run      (no GPU: every launcher on a small shape, interpreter)
    python -m bench w2d456-limits --days w2d5 --shapes 6000x3000x4096,6000x3008x4096   (other shapes)
    python -m bench w2d456-limits --sass-counts DUMP.txt.gz   (opcode counts of a --sass dump, no GPU)

Several ``--warm`` processes side by side fill Triton's on-disk cache before the timed run, which then compiles
nothing. Before timing, each variant's first output at each shape (output memory poisoned with NaN first) is
compared with the fp64 product; a variant that fails or that the compiler refuses is left out and named.

For each variant: its time and TFLOP/s, the ratio library time / variant time at the spec's GPU shapes and their
geometric mean, the ratio to the reference, and (from the build at the largest shape) registers, spills, shared
memory and the SASS opcodes that say which path it took (HGMMA: wgmma; HMMA: mma.sync; LDGSTS: cp.async;
UTMALDG/UTMASTG: TMA).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if "--dry-run" in sys.argv:  # triton.language's own jit functions read the interpreter switch when imported
    os.environ["TRITON_INTERPRET"] = "1"

import torch
import triton

import course
from bench import harness
from course import bench, device
from course import spec as specs
from course.check import relative_error
from course.spec import geometric_mean

REPO = Path(__file__).resolve().parent.parent


if TYPE_CHECKING:
    from bench.w2d456_limit_kernels import Day

OPCODES = ("HGMMA", "HMMA", "LDGSTS", "UTMALDG", "UTMASTG", "LDSM", "LDS", "STS", "STG", "BAR", "SYNCS", "WARPGROUP")


def opcode_counts(sass: str) -> collections.Counter:
    """Opcodes of SASS text, either Triton's ``asm["sass"]`` form (control codes, a tab, the instruction) or
    nvdisasm's (``/*0a30*/  INSTR ...;``); predicates dropped, modifiers cut (HGMMA.64x128x16.F32 counts as HGMMA)."""
    ops: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        if "\t" in line:
            text = line.rsplit("\t", 1)[1]
        else:
            found = re.match(r"\s*/\*[0-9a-f]+\*/\s+(.*)", line)
            if not found:
                continue
            text = found.group(1)
        text = re.sub(r"^@!?U?P\w+\s+", "", text.strip())
        opcode = text.split(" ", 1)[0].split(".", 1)[0]
        if re.fullmatch(r"[A-Z][A-Z0-9_]+", opcode):
            ops[opcode] += 1
    return ops


def sass_sections(path: Path) -> dict[str, dict[str, int]]:
    """Per ``===== day variant shape =====`` section of a ``--sass`` dump (gzip or text): the opcode counts of
    OPCODES and the instruction total (static)."""
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        text = handle.read()
    out = {}
    for header, body in re.findall(r"===== (.+?) =====\n(.*?)(?=\n===== |\Z)", text, flags=re.S):
        ops = opcode_counts(body)
        out[header] = {"sass_instructions": sum(ops.values()), **{op: ops[op] for op in OPCODES if ops[op]}}
    return out


def kernel_facts(compiled) -> tuple[dict[str, object], str]:
    """Registers, spills, shared memory, and opcode counts of the whole SASS (static)."""
    facts: dict[str, object] = {"n_regs": getattr(compiled, "n_regs", None),
                                "n_spills": getattr(compiled, "n_spills", None),
                                "shared_bytes": getattr(compiled.metadata, "shared", None),
                                "num_warps": getattr(compiled.metadata, "num_warps", None),
                                "num_stages": getattr(compiled.metadata, "num_stages", None)}
    try:
        ptx = compiled.asm["ptx"]
        facts["ptx_wgmma"] = len(re.findall(r"wgmma\.mma_async", ptx))
        facts["ptx_mma_sync"] = len(re.findall(r"\bmma\.sync", ptx))
        facts["ptx_wgmma_shapes"] = sorted(set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+)", ptx)))
    except Exception as error:  # noqa: BLE001
        facts["ptx_error"] = f"{type(error).__name__}: {error}"[:200]
    try:
        sass = compiled.asm["sass"]
    except Exception as error:  # noqa: BLE001  (cuobjdump missing: the rest still stands)
        facts["sass_error"] = f"{type(error).__name__}: {error}"[:200]
        return facts, ""
    ops = opcode_counts(sass)
    facts["sass_instructions"] = sum(ops.values())
    facts["sass_ops"] = {op: ops[op] for op in OPCODES if ops[op]}
    facts["sass_top"] = dict(ops.most_common(10))
    return facts, sass


def _poison(shape: tuple[int, int], dtype: torch.dtype) -> None:
    """Leave a NaN-filled block of the output's size at the top of torch's cache: a fresh output that reuses it and
    misses an element fails the check instead of passing on an earlier variant's right answer."""
    junk = torch.full(shape, float("nan"), device="cuda", dtype=dtype)
    del junk


def freivalds(a64: torch.Tensor, b64: torch.Tensor, tolerance: float, record: dict):
    """``after`` for a timed call: C x against A (B x) in fp64 for a fresh secret x (cached fp64 copies of A and B);
    a failure is counted in ``record["timed_checks_failed"]``."""
    def after(args: tuple, out: torch.Tensor, i: int) -> None:
        g = torch.Generator(device="cuda").manual_seed(secrets.randbits(63))
        x = torch.randn((b64.shape[1], 2), generator=g, device="cuda", dtype=torch.float64)
        expected = a64 @ (b64 @ x)
        got = out.double() @ x
        err = float(torch.linalg.vector_norm(got - expected) / torch.linalg.vector_norm(expected))
        if not err <= tolerance:
            record["timed_checks_failed"] += 1

    return after


def warm(chosen: list[Day], first: int, step: int, shapes: list[tuple[int, ...]] | None = None) -> int:
    pairs = [(day, v) for day in chosen for v in day.variants]
    for day, variant in pairs[first::step]:
        spec = specs.get(day.spec_id)
        for shape in shapes or spec.bench_shapes.gpu:
            inputs = spec.make_inputs(tuple(shape), 1, "cuda")
            for fn in (variant.fn, variant.twin):
                try:
                    fn(*inputs)
                except Exception as error:  # noqa: BLE001  (a refused launch: the timed run names it)
                    print(f"warm {day.key} {variant.name} at {shape}: {type(error).__name__}: {str(error)[:200]}")
                    break
            del inputs
    torch.cuda.synchronize()
    return 0


def dry_run(chosen: list[Day]) -> int:
    """No GPU: each launcher on one small shape in Triton's interpreter, against fp64 (layout and wiring only)."""
    failures = 0
    for day in chosen:
        spec = specs.get(day.spec_id)
        inputs = spec.make_inputs((130, 136, 72), 3, "cpu")
        exact = inputs[0].double() @ inputs[1].double()
        for variant in day.variants:
            began = time.perf_counter()
            try:
                out = variant.fn(*inputs)
                error = relative_error(out, exact)
            except Exception as exc:  # noqa: BLE001
                error, out = float("inf"), None
                print(f"{day.key} {variant.name}: {type(exc).__name__}: {str(exc)[:300]}")
            ok = out is not None and out.dtype == day.dtype and error <= spec.tolerance
            failures += not ok
            print(f"{day.key:<10} {variant.name:<36} {'ok' if ok else 'FAIL'} rel. error {error:.1e} "
                  f"({time.perf_counter() - began:.1f} s)")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--sass", type=Path, default=None, help="write each variant's SASS (largest shape) here")
    p.add_argument("--warm", default=None, help="I/N: only compile (run once) every N-th (day, variant)")
    p.add_argument("--days", default="w2d4,w2d5,w2d6_fp16,w2d6_bf16")
    p.add_argument("--dry-run", action="store_true", help="CPU interpreter, small shape, no timing")
    p.add_argument("--shapes", default=None, help="MxNxK,... instead of each spec's GPU benchmark shapes")
    p.add_argument("--sass-counts", type=Path, default=None, help="print the opcode counts of a --sass dump, exit")
    args = p.parse_args(argv)
    if args.sass_counts:
        print(json.dumps(sass_sections(args.sass_counts), indent=1))
        return 0
    info = device.configure("cpu" if args.dry_run else "auto")
    from bench.w2d456_limit_kernels import days  # after configure: Triton reads the interpreter switch at @jit

    wanted = [d.strip() for d in args.days.split(",") if d.strip()]
    chosen = [d for d in days() if d.key in wanted]
    if args.dry_run:
        return dry_run(chosen)
    if not info.has_gpu:
        print(f"no GPU: nothing measured ({bench.NO_GPU})")
        return 0
    if args.warm:
        first, step = map(int, args.warm.split("/"))
        shapes = [tuple(int(x) for x in item.split("x")) for item in args.shapes.split(",")] if args.shapes else None
        return warm(chosen, first, step, shapes)
    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit",
                          "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    result: dict = {"device": info.name, "nvidia_smi": smi, "torch": torch.__version__, "triton": triton.__version__,
                    "course_version": getattr(course, "__version__", None), "days": {}, "notes": []}
    sass_text: list[str] = []

    def emit() -> None:
        harness.write_json(args.json, result)

    began_all = time.perf_counter()
    for day in chosen:
        spec = specs.get(day.spec_id)
        shapes = [tuple(s) for s in spec.bench_shapes.gpu]
        if args.shapes:
            shapes = [tuple(int(x) for x in item.split("x")) for item in args.shapes.split(",")]
        keys = ["x".join(map(str, s)) for s in shapes]
        largest = max(shapes, key=spec.flops)
        entry = {"spec": day.spec_id, "technique": day.technique, "library": spec.library_name,
                 "shapes": keys, "tolerance": spec.tolerance,
                 "variants": {v.name: {"what": v.what, "in_technique": v.in_technique, "reference": v.reference,
                                       "ms": {}, "tflops": {}, "ratio_vs_library": {}, "rel_error": {},
                                       "timed_checks_failed": 0, "kernel": {}} for v in day.variants},
                 "library_ms": {}, "library_tflops": {}}
        result["days"][day.key] = entry
        for shape, key in zip(shapes, keys, strict=True):
            inputs = spec.make_inputs(shape, 1, "cuda")
            a64, b64 = inputs[0].double(), inputs[1].double()
            exact = a64 @ b64
            out_shape = (shape[0], shape[1])
            usable = []
            for variant in day.variants:
                record = entry["variants"][variant.name]
                began = time.perf_counter()
                try:
                    _poison(out_shape, day.dtype)
                    out = variant.fn(*inputs)
                    torch.cuda.synchronize()
                    error = relative_error(out, exact)
                    variant.twin(*inputs)  # the same binary: its registers and SASS
                    torch.cuda.synchronize()
                    facts, sass = kernel_facts(variant.twin.compiled)
                    record.setdefault("kernel_by_shape", {})[key] = {k: facts.get(k) for k in (
                        "n_regs", "n_spills", "shared_bytes", "sass_instructions", "sass_ops")}
                    if shape == largest:
                        record["kernel"] = facts
                        sass_text.append(f"===== {day.key} {variant.name} {key} =====\n{sass}")
                except Exception as exc:  # noqa: BLE001  (a launch this GPU or compiler refuses: left out, named)
                    result["notes"].append(f"{day.key} {variant.name} at {key}: {type(exc).__name__}: "
                                           f"{str(exc)[:300]}")
                    print(result["notes"][-1])
                    continue
                record["rel_error"][key] = error
                if not (out.dtype == day.dtype and error <= spec.tolerance):
                    result["notes"].append(f"{day.key} {variant.name} at {key}: wrong (relative error {error:.2e},"
                                           f" dtype {out.dtype})")
                    print(result["notes"][-1])
                    continue
                print(f"{day.key} {variant.name} at {key}: ok, first call {time.perf_counter() - began:.1f} s, "
                      f"rel. error {error:.1e}")
                usable.append(variant)
                del out
            del exact

            timings = bench.time_interleaved(
                [bench.Timed(v.fn, args=inputs, after=freivalds(a64, b64, spec.tolerance, entry["variants"][v.name]))
                 for v in usable]
                + [bench.Timed(lambda *x, s=spec: s.library(x), args=inputs)])
            lib_ms = timings[-1].median_ms
            entry["library_ms"][key] = lib_ms
            entry["library_tflops"][key] = spec.flops(shape) / lib_ms / 1e9
            for variant, timing in zip(usable, timings[:-1], strict=True):
                record = entry["variants"][variant.name]
                record["ms"][key] = timing.median_ms
                record["tflops"][key] = spec.flops(shape) / timing.median_ms / 1e9
                record["ratio_vs_library"][key] = lib_ms / timing.median_ms
                record.setdefault("spread", {})[key] = timing.spread
                record.setdefault("repeats", {})[key] = timing.repeats
            print(f"{day.key} {key}: {spec.library_name} {lib_ms:.3f} ms = {entry['library_tflops'][key]:.1f} "
                  f"TFLOP/s ({time.perf_counter() - began_all:.0f} s in)")
            del inputs, a64, b64
            torch.cuda.empty_cache()
            emit()
        ref = next(v.name for v in day.variants if v.reference)
        for record in entry["variants"].values():
            values = [record["ratio_vs_library"].get(k, float("nan")) for k in keys]
            record["geomean_vs_library"] = geometric_mean(values)
            ref_values = [entry["variants"][ref]["ms"].get(k, float("nan")) / record["ms"][k]
                          if k in record["ms"] else float("nan") for k in keys]
            record["vs_reference"] = dict(zip(keys, ref_values, strict=True))
            record["geomean_vs_reference"] = geometric_mean(ref_values)
        candidates = {n: r["geomean_vs_library"] for n, r in entry["variants"].items()
                      if r["in_technique"] and not r["reference"] and r["geomean_vs_library"] > 0}
        if candidates:
            best = max(candidates, key=candidates.get)
            entry["best"] = {"name": best, "geomean_vs_library": candidates[best],
                             "geomean_vs_reference": entry["variants"][best]["geomean_vs_reference"]}
        emit()
    if args.sass:
        args.sass.write_text("\n".join(sass_text), encoding="utf-8")
    print(f"\n{info.name} ({smi}): library time / variant time, same rounds; geomean over the spec's GPU shapes")
    for key, entry in result["days"].items():
        shapes = entry["shapes"]
        print(f"\n{key} ({entry['spec']}, against {entry['library']})")
        print(f"{'variant':<36}" + "".join(f"{k:>16}" for k in shapes) + f"{'geomean':>9}{'vs ref':>8}{'regs':>6}"
              f"{'HGMMA':>7}")
        for name, r in entry["variants"].items():
            cells = "".join(f"{r['ratio_vs_library'].get(k, float('nan')):>16.3f}" for k in shapes)
            kernel = r.get("kernel", {})
            flag = "" if r["in_technique"] else " (info)"
            print(f"{(name + flag)[:36]:<36}{cells}{r['geomean_vs_library']:>9.3f}{r['geomean_vs_reference']:>8.3f}"
                  f"{kernel.get('n_regs') or 0:>6}{kernel.get('sass_ops', {}).get('HGMMA', 0):>7}")
        print(f"{'library TFLOP/s':<36}" + "".join(f"{entry['library_tflops'].get(k, 0):>16.1f}" for k in shapes))
        if "best" in entry:
            print(f"best: {entry['best']['name']} {entry['best']['geomean_vs_library']:.3f} of the library, "
                  f"{entry['best']['geomean_vs_reference']:.3f}x the reference")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
