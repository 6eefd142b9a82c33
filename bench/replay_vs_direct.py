"""A CUDA kernel replayed by the judge against the same kernel called directly, timed in the same rounds.

    python bench/replay_vs_direct.py [--json FILE]

On an H200 the judge timed Week 2 Day 3's ``transpose_salign`` (the reference, at 3001 x 5003) at 0.83-0.84 of
torch's copy, a direct call of the same source at 0.72-0.73 (bench/RESULTS.md, session 20). This records one call
of the solution notebook's ``transpose_padded`` as the notebook's recording does, builds its kernels as the
grader's builder does (``grader.kernel_build.build_kernels``, in this process), and times beside torch's copy: the
direct call,
the judge's replay of the recorded plan (``grader.replay.gpu_replay``), each on fresh inputs, at an odd and an
aligned shape.
It prints what each path loaded (cubin or PTX, and the image's size). GPU only; on a CPU it says so and exits 0.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import nbformat  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import course  # noqa: E402
from bench.script_cli import gpu_or_say_so, parser  # noqa: E402
from course import bench, cuda  # noqa: E402
from course import spec as specs  # noqa: E402
from course.recorder import plan  # noqa: E402

NOTEBOOK = REPO / "solutions" / "week2" / "day3_bank_conflicts.ipynb"
CELLS = ("conflicted_kernel", "padded_source", "transpose_padded")


def solution_cells() -> dict:
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    by_id = {c.metadata.get("nbgrader", {}).get("grade_id"): c.source for c in nb.cells}
    namespace = {"course": course, "np": np, "torch": torch, "grading": True}
    for grade_id in CELLS:
        exec(by_id[grade_id], namespace)  # noqa: S102 (the course's own solution)
    return namespace


def measure(spec, direct, shape: tuple[int, int], arch: int) -> dict[str, object]:
    """The direct call's and the replay's ratio to torch's copy at ``shape``, and what the builder made."""
    from grader.kernel_build import build_kernels
    from grader.replay import gpu_replay as replay

    (x,) = spec.make_inputs(shape, 1, "cuda")
    _, recorded = plan.record_call(direct, (x,))
    out_shape = tuple(spec.output_shape(shape))

    def fresh(i: int) -> tuple:
        return spec.make_inputs(shape, 100 + i, "cuda")

    with tempfile.TemporaryDirectory() as work:
        export = Path(work) / "export.json"
        export.write_text(json.dumps({"kernels": {spec.id: {"calls": {"c": {"plan": recorded}}}}}))
        index = build_kernels.build({"notebook": str(NOTEBOOK), "export": str(export),
                                     "target": {"backend": "cuda", "arch": arch, "warp_size": 32},
                                     "out": str(Path(work) / "built")})
        kernels = replay.load_kernels(Path(work) / "built")

        def prepared(i: int) -> tuple:
            return (replay.prepare(recorded, fresh(i), kernels, torch.float32, out_shape, 2**34),)

        timings = bench.time_interleaved([bench.Timed(direct, fresh), bench.Timed(replay.launch, prepared),
                                          bench.Timed(torch.Tensor.clone, fresh)])
    copy_ms = timings[2].median_ms
    return {"kernels": [launch["kernel"] for launch in recorded["launches"]],
            "direct": copy_ms / timings[0].median_ms, "replayed": copy_ms / timings[1].median_ms,
            "copy GB/s": bench.gbps(2 * x.numel() * 4, copy_ms),
            "built": [(entry.get("format"), entry.get("options")) for entry in index.values()]}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__)
    args = p.parse_args(argv)
    info = gpu_or_say_so()
    if info is None:
        return 0
    spec = specs.get("w2d3.transpose_padded")
    namespace = solution_cells()
    major, minor = info.compute_capability
    loaded = {name: (module.kind, module.options) for name, module in namespace.items()
              if isinstance(module, cuda.Module)}
    print(f"{info.name}: the notebook's own modules {loaded}")
    found = {}
    for shape in ((3001, 5003), (4096, 4096)):
        key = "x".join(map(str, shape))
        found[key] = measure(spec, namespace["transpose_padded"], shape, major * 10 + minor)
        row = found[key]
        print(f"{key}: {row['kernels']} direct {row['direct']:.3f}, replayed {row['replayed']:.3f} of torch's copy "
              f"({row['copy GB/s']:.0f} GB/s); built {row['built']}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"device": info.name, "notebook_modules": loaded, "ratios": found}, indent=1,
                                        default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
