"""One launch at 4096^3 (fp32) of a Week 1 Day 7 limit-study kernel or of cuBLAS SGEMM, between
cudaProfilerStart and cudaProfilerStop, for ``ncu --profile-from-start off`` (bench/w1d7_limit_ncu.py).

    python -m bench.w1d7_limit_profile {ref,best,gluon,gluon_async,gluon_async_16x8,cublas} [--size N]

Two warm-up calls (compilation, cuBLAS's handle) run before the profiled one. GPU only.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from bench import harness
from bench.w1d7_limit_kernels import dot_launcher, gluon_async_launcher, gluon_launcher

REPO = Path(__file__).resolve().parent.parent



def cublas(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch.mm(a, b)


KERNELS = {"ref": dot_launcher(64, 64, 32, 4, 3, 1), "best": dot_launcher(64, 128, 32, 8, 3),
           "gluon": gluon_launcher(64, 128, 32, 2, 2, even_k=True), "cublas": cublas,
           "gluon_async": gluon_async_launcher(64, 128, 32, 2, 2, 3),
           "gluon_async_16x8": gluon_async_launcher(128, 128, 32, 2, 2, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kernel", choices=sorted(KERNELS))
    p.add_argument("--size", type=int, default=4096)
    args = p.parse_args(argv)
    torch.backends.cuda.matmul.allow_tf32 = False
    generator = torch.Generator(device="cuda").manual_seed(1)
    a, b = (torch.randn(args.size, args.size, device="cuda", generator=generator) for _ in range(2))
    fn = KERNELS[args.kernel]
    out = harness.profiled_launch(fn, a, b)
    error = float(torch.linalg.vector_norm(out.double() - a.double() @ b.double()) / torch.linalg.vector_norm(out))
    print(f"{args.kernel}: profiled one launch at {args.size}^3, relative error {error:.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
