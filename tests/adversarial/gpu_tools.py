"""GPU helpers for the adversarial corpus (run them on a GPU machine; they need no Jupyter or nbgrader).

``measure``: time the kernels of some fixtures with the course's own harness (course.bench.measure,
the same rows the old grader scored), to pin down the performance verdicts in expected.py::

    python3 tests/adversarial/gpu_tools.py measure honest_fast honest_slow

``ttgir``: compile a generic (unspecialised) 64 x 64 x 32 ieee fp32 kernel and print its TTGIR as the
zlib + base64 blob that fixture ``kernel_from_ttgir_blob`` carries, then check that the blob, compiled
back with ``triton.compile``, multiplies correctly::

    python3 tests/adversarial/gpu_tools.py ttgir > blob.txt
"""

from __future__ import annotations

import argparse
import base64
import json
import linecache
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path[:0] = [str(HERE), str(REPO)]

from build import fixtures  # noqa: E402


def notebook_namespace() -> dict[str, Any]:
    """What the notebook's setup cell defines, on the GPU."""
    import course

    device = course.device.configure("gpu")
    import torch
    import triton
    import triton.language as tl

    return {"__name__": "__main__", "course": course, "DEVICE": device, "torch": torch, "triton": triton, "tl": tl,
            "SPEC": course.spec.get("w1d7.matmul_fp32")}


def exec_cell(source: str, namespace: dict[str, Any], name: str) -> None:
    """Run cell source so that @triton.jit can read it back (as IPython registers its cells)."""
    filename = f"<{name}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)


def measure(names: list[str], replacements: list[str]) -> dict[str, Any]:
    import course

    report = {}
    for name, fixture in fixtures(names).items():
        source = fixture.answers["matmul_kernel"]
        for replacement in replacements:
            old, new = replacement.split("=>")
            source = source.replace(old, new)
        namespace = notebook_namespace()
        exec_cell(source, namespace, name)
        perf = course.bench.measure(namespace["SPEC"], namespace["matmul"])
        rows = [{"shape": list(r.shape), "student_gflops": round(r.student_gflops), "error": r.error,
                 "cublas_gflops": round(r.library_gflops), "vs_cublas": round(r.vs_library, 3)}
                for r in perf.rows]
        report[name] = {"rows": rows, "geomean_gflops": round(perf.geomean_gflops),
                        "geomean_vs_cublas": round(perf.geomean_vs_library, 3)}
        print(json.dumps({name: report[name]}), flush=True)
    if "honest_fast" in report:
        reference = {tuple(r["shape"]): r["student_gflops"] for r in report["honest_fast"]["rows"]}
        for name, entry in report.items():
            ratios = [r["student_gflops"] / reference[tuple(r["shape"])] for r in entry["rows"]]
            product = 1.0
            for ratio in ratios:
                product *= max(ratio, 1e-12)
            entry["geomean_vs_reference"] = round(product ** (1 / len(ratios)), 3)
            print(f"{name}: {entry['geomean_gflops']} GFLOP/s, {entry['geomean_vs_cublas']} of cuBLAS, "
                  f"{entry['geomean_vs_reference']} of honest_fast", flush=True)
    return report


GENERIC_KERNEL = '''
@triton.jit(do_not_specialize=["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                                "stride_cm", "stride_cn"])
def tile_mm(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + ks) < K
        a = tl.load(a_ptrs, mask=(rows[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=k_ok[:, None] & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))
'''


def ttgir_blob() -> str:
    namespace = notebook_namespace()
    torch, triton = namespace["torch"], namespace["triton"]
    exec_cell(GENERIC_KERNEL, namespace, "tile_mm")
    a = torch.randn(100, 70, device="cuda")
    b = torch.randn(70, 50, device="cuda")
    c = torch.empty(100, 50, device="cuda")
    compiled = namespace["tile_mm"][(2, 1)](a, b, c, 100, 50, 70, *a.stride(), *b.stride(), *c.stride(),
                                           BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3)
    text = compiled.asm["ttgir"]
    blob = base64.b64encode(zlib.compress(text.encode(), 9)).decode()
    # Round trip: the blob alone, compiled in this process, must multiply correctly.
    path = Path(tempfile.mkdtemp()) / "tile_mm.ttgir"
    path.write_text(zlib.decompress(base64.b64decode(blob)).decode())
    kernel = triton.compile(str(path))
    for m, n, k in ((512, 512, 512), (1000, 1030, 515), (1, 300, 257), (3001, 17, 64)):
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        c = torch.full((m, n), float("nan"), device="cuda")
        kernel[(triton.cdiv(m, 64), triton.cdiv(n, 64), 1)](a, b, c, m, n, k, *a.stride(), *b.stride(), *c.stride())
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        error = float((c.double() - ref).norm() / ref.norm())
        print(f"round trip {m}x{n}x{k}: relative error {error:.2e}", file=sys.stderr)
        assert error < 1e-5
    print(f"signature: {text[text.find('tt.func'):text.find('{', text.find('tt.func'))][:400]}", file=sys.stderr)
    print(f"{len(text)} characters of TTGIR, {len(blob)} of blob", file=sys.stderr)
    return blob


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("measure")
    p.add_argument("names", nargs="+")
    p.add_argument("--replace", action="append", default=[], help="OLD=>NEW applied to the kernel cell")
    p.add_argument("--out")
    commands.add_parser("ttgir")
    args = parser.parse_args(argv)
    if args.command == "measure":
        report = measure(args.names, args.replace)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=1))
    else:
        print(ttgir_blob())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
