"""The CUDA images the grader's builder made in a grading run against the same sources compiled in this process.

    python bench/built_vs_direct.py OUT [--json FILE]

For every CUDA module in OUT's run folders (``runs/*/*/*/built/index.json``) this compiles the same source with
the same options through ``course.cuda.nvrtc_compile`` here, says whether the two images are byte-identical and
which NVRTC this process has, and times Week 2 Day 3's ``transpose_salign`` from each image beside torch's copy at
3001 x 5003, twice (bench/RESULTS.md, session 20: the judge timed it at 0.83-0.84 of copy, a direct call at
0.71-0.73, because of the heater ``course.bench`` had then; session 21 replaced it with a spin).
GPU only; on a CPU it says so and exits 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import nbformat  # noqa: E402
import torch  # noqa: E402

from bench.script_cli import gpu_or_say_so, parser  # noqa: E402
from course import bench, cuda  # noqa: E402
from grader.kernel_build.build_cuda import string_constants  # noqa: E402

SHAPE = (3001, 5003)


def sources(notebook: Path) -> dict[str, str]:
    nb = nbformat.read(str(notebook), as_version=4)
    constants = string_constants([c.source for c in nb.cells if c.cell_type == "code"])
    return {cuda.source_digest(text): text for text in constants.values()}


def timed_salign(image: bytes) -> bench.Timed:
    function = cuda.Function.find(cuda.load_image(image), "transpose_salign")
    rows, cols = SHAPE

    def call(x: torch.Tensor) -> torch.Tensor:
        out = torch.empty((cols, rows), device="cuda")
        arguments = [("pointer", x.data_ptr()), ("pointer", out.data_ptr()), ("int32", rows), ("int32", cols)]
        function.launch((cuda.cdiv(cols, 32), cuda.cdiv(rows + 7, 32), 1), (256, 1, 1), 0, cuda.pack(arguments))
        return out

    return bench.Timed(call, lambda i: (torch.randn(SHAPE, device="cuda"),))


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    p.add_argument("out", type=Path)
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    major, minor = info.compute_capability
    nvrtc = cuda._cupy().cuda.nvrtc
    report: dict[str, object] = {"device": info.name, "nvrtc_here": nvrtc.getVersion(), "modules": []}
    print(f"{info.name}: NVRTC here {nvrtc.getVersion()}")
    salign: dict[str, bytes] = {}
    for index in sorted(args.out.glob("runs/*/*/*/built/index.json")):
        notebook = index.parents[1] / "sanitized.ipynb"
        by_digest = sources(notebook)
        for entry in json.loads(index.read_text()).values():
            if not entry.get("cuda"):
                continue
            built = (index.parent / entry["file"]).read_bytes()
            source = by_digest[entry["source_sha256"]]
            here, kind = cuda.nvrtc_compile(source, tuple(entry.get("options") or ()), major * 10 + minor)
            row = {"run": str(index.parents[1].relative_to(args.out)), "format": entry.get("format"),
                   "here": kind, "identical": built == here, "built_bytes": len(built), "here_bytes": len(here)}
            report["modules"].append(row)
            print(row)
            if "transpose_salign" in source:
                salign = {"built": built, "here": here}
    if salign:
        entries = [timed_salign(salign["built"]), timed_salign(salign["here"]),
                   bench.Timed(torch.Tensor.clone, lambda i: (torch.randn(SHAPE, device="cuda"),))]
        for _ in range(2):
            timings = bench.time_interleaved(entries)
            copy_ms = timings[2].median_ms
            ratios = {"built": copy_ms / timings[0].median_ms, "here": copy_ms / timings[1].median_ms,
                      "copy_ms": copy_ms}
            report.setdefault("salign_ratios", []).append(ratios)
            print(f"transpose_salign at 3001x5003, ratio to torch's copy: builder's image {ratios['built']:.3f}, "
                  f"this process's {ratios['here']:.3f} (copy {copy_ms * 1e3:.1f} us)")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
