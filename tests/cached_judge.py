"""A judge's kernel load in a fresh process (``python -P -m tests.cached_judge REQUEST.json``), as
grader.judge.verdict loads them: ``grader.replay.gpu_replay.load_kernels`` on a built folder and a Triton cache. With
``forbid_compiling`` every stage of Triton's compiler raises, so a kernel not found in the cache becomes an
error instead of being compiled. Prints what it found as JSON; with a recorded ``plan`` (on a GPU) it also
replays that plan on fresh inputs of ``spec`` and prints the output's relative error to the reference.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _refuse(module: Any, metadata: dict[str, Any]) -> Any:
    raise RuntimeError("a stage of Triton's compiler ran")


def _every_stage_refuses(backend: Any, stages: dict[str, Any], options: Any, language: Any, capability: Any) -> None:
    for name in stages:
        stages[name] = _refuse


def main(argv: list[str]) -> int:
    from triton import knobs
    from triton.backends.compiler import GPUTarget

    from grader.replay import gpu_replay as replay

    request = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    if request.get("forbid_compiling"):
        knobs.runtime.add_stages_inspection_hook = _every_stage_refuses
    target = GPUTarget(**request["target"]) if request.get("target") else None
    kernels = replay.load_kernels(Path(request["built"]), target=target, cache=Path(request["cache"]))
    found: dict[str, Any] = {"loaded": kernels.loaded, "compiled_here": kernels.compiled_here,
                             "errors": kernels.errors, "digests": kernels.digests}
    if request.get("plan"):
        import torch

        from course import check
        from course import spec as specs

        spec = specs.get(request["spec"])
        fresh = spec.make_inputs(tuple(request["shape"]), request["seed"], "cuda")
        prepared = replay.prepare(request["plan"], fresh, kernels, getattr(torch, request["output_dtype"]),
                                  tuple(request["output_shape"]), 2**28)
        out = replay.launch(prepared)
        torch.cuda.synchronize()
        found["relative_error"] = float(check.relative_error(out, spec.reference(fresh)))
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
