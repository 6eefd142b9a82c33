#!/usr/bin/env bash
# Week 2 Day 3 on a GPU: Nsight Compute's shared-memory bank-conflict counters for the conflicted and
# padded transposes of solutions/week2/day3_bank_conflicts.ipynb, then their bandwidth on the spec's
# benchmark shapes beside torch's copy (the numbers the w2d3.transpose_padded thresholds are set from).
#
# Run from the repository root with the grader's Python environment (CuPy, torch):
#     bash bench/ncu_bank_conflicts.sh            # NCU=/path/to/ncu to choose another ncu
# ncu needs permission to read the GPU's counters (root, or NVreg_RestrictProfilingToAdminUsers=0);
# without it the first part says so and the timing part still runs.
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export NCU="${NCU:-ncu}"
PYTHON="${PYTHON:-python3}"

"$PYTHON" - <<'EOF'
import ast
import os
import sys

import nbformat
import numpy as np
import torch

import course
import course.days.banks

course.device.configure("gpu")
constants = {}
for cell in nbformat.read("solutions/week2/day3_bank_conflicts.ipynb", as_version=4).cells:
    if cell.cell_type == "code":
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
                try:
                    constants[node.targets[0].id] = ast.literal_eval(node.value)
                except ValueError:
                    pass
options = list(constants["TRANSPOSE_OPTIONS"])
kernels = [{"name": "transpose_conflicted", "source": constants["TRANSPOSE_CONFLICTED_SOURCE"], "options": options},
           {"name": "transpose_padded", "source": constants["TRANSPOSE_PADDED_SOURCE"], "options": options}]
failures = 0

print(f"== ncu counters on {torch.cuda.get_device_name()} ({os.environ['NCU']})")
for n in (4096, 8192):
    predicted = n * n // 32 * 31
    try:
        counters = course.days.banks.ncu_counters({"n": n, "tile": 32, "block": [32, 8], "kernels": kernels},
                                             ncu=os.environ["NCU"])
    except Exception as error:
        print(f"NOT RUN n={n}: {type(error).__name__}: {error}")
        break
    for name, found in counters.items():
        ld, st, passes = (found.get(m, float("nan")) for m in course.days.banks.NCU_METRICS)
        print(f"n={n} {name:<22} load conflicts {ld:>14,.0f}  store conflicts {st:>12,.0f}  "
              f"load wavefronts {passes:>14,.0f}   (predicted load conflicts: "
              f"{predicted if name == 'transpose_conflicted' else 0:,})")
    conflicted = counters.get("transpose_conflicted", {}).get(course.days.banks.NCU_METRICS[0], 0.0)
    padded = counters.get("transpose_padded", {}).get(course.days.banks.NCU_METRICS[0], float("inf"))
    ok = conflicted >= 0.5 * predicted and padded <= 0.01 * conflicted
    failures += not ok
    print(f"{'PASS' if ok else 'FAIL'} n={n}: conflicted {conflicted:,.0f} load conflicts, padded {padded:,.0f} "
          "(padded at most 1% of conflicted)")

print("== bandwidth (GB/s of bytes read + written), course harness, the spec's benchmark shapes")
from course import bench, cuda, spec  # noqa: E402

SPEC = spec.get("w2d3.transpose_padded")
functions = {k["name"]: cuda.compile(k["source"], tuple(options)).get_function(k["name"]) for k in kernels}


def wrapper(name):
    def transpose(x):
        rows, cols = x.shape
        out = torch.empty((cols, rows), device="cuda")
        functions[name]((cuda.cdiv(cols, 32), cuda.cdiv(rows, 32)), (32, 8), (x, out, np.int32(rows), np.int32(cols)))
        return out
    return transpose


ratios = {"padded/copy": [], "conflicted/copy": [], "conflicted/padded": []}
for shape in SPEC.bench_shapes.gpu:
    x = SPEC.make_inputs(shape, 0, "cuda")[0]
    work = SPEC.work(shape)
    ms = {"copy": bench.time_calls(lambda t: SPEC.baseline((t,)), args=(x,)).median_ms}
    for name in ("transpose_conflicted", "transpose_padded"):
        fn = wrapper(name)
        assert torch.equal(fn(x), x.t()), f"{name} is wrong on {shape}"
        ms[name.removeprefix("transpose_")] = bench.time_calls(fn, args=(x,)).median_ms
    rates = {k: work / (v * 1e-3) / 1e9 for k, v in ms.items()}
    ratios["padded/copy"].append(rates["padded"] / rates["copy"])
    ratios["conflicted/copy"].append(rates["conflicted"] / rates["copy"])
    ratios["conflicted/padded"].append(rates["conflicted"] / rates["padded"])
    print(f"{shape}: copy {rates['copy']:.0f}, conflicted {rates['conflicted']:.0f}, padded {rates['padded']:.0f} GB/s")
for name, values in ratios.items():
    shown = ", ".join(f"{v:.3f}" for v in values)
    print(f"geometric mean {name}: {spec.geometric_mean(values):.3f}  (per shape {shown})")
faster = spec.geometric_mean(ratios["conflicted/padded"]) < 0.95
failures += not faster
print(f"{'PASS' if faster else 'FAIL'} the padded kernel is measurably faster than the conflicted one")
sys.exit(1 if failures else 0)
EOF
