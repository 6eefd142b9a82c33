"""Week 2 bonus day, the CUDA-core SGEMM ladder: sources, specs, CPU arithmetic, provenance, kernels.

Without a GPU the kernels cannot run, so on this machine they are checked three ways: every CUDA
source of the course's solution notebooks compiles with nvcc for sm_90 (skipped aloud without nvcc,
never passed); the ladder's eight kernels run in a CPU emulation of CUDA thread blocks (one thread
per CUDA thread, ``__syncthreads`` as a barrier) under g++'s address and alignment sanitizers, on
sizes with edges everywhere (skipped aloud without g++); and on a GPU they run for real.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch

from course import cuda
from course import spec as specs
from course.days import sgemm_ladder
from course.exercises import w2_sgemm_ladder as ladder_specs
from grader.judge import on_gpu, provenance
from tests.adversarial.build import apply, fixtures, released_notebook

REPO = Path(__file__).resolve().parent.parent
SOLUTION = REPO / "solutions" / "week2" / "bonus_sgemm_ladder.ipynb"
STUDENT = REPO / "week2" / "bonus_sgemm_ladder.ipynb"
VERSIONS = ladder_specs.VERSIONS
# Each launch the solution's wrappers make: version, compile options, tile rows, tile columns, block and
# dynamic shared bytes (v7 has two tiles, one source).
LAUNCHES = [("v1", (), 8, 32, (32, 8), 0), ("v2", (), 32, 32, (32, 32), 0), ("v3", (), 32, 32, (32, 32), 0),
            ("v4", (), 64, 64, (512, 1), 0), ("v5", (), 128, 128, (256, 1), 0), ("v6a", (), 128, 128, (256, 1), 0),
            ("v6b", (), 128, 128, (256, 1), 0), ("v7", (), 128, 256, (256, 1), 4 * (2 * 16 * 132 + 2 * 16 * 256)),
            ("v7", ("-DNI=2",), 128, 128, (256, 1), 4 * (2 * 16 * 132 + 2 * 16 * 128))]
LAUNCH_IDS = [version + "".join(options) for version, options, *_ in LAUNCHES]
DYNAMIC_SHARED = "extern __shared__ __align__(16) float smem[];"


def _cells(path: Path) -> list[nbformat.NotebookNode]:
    return nbformat.read(str(path), as_version=4).cells


def _by_id(path: Path) -> dict[str, nbformat.NotebookNode]:
    return {c.metadata.get("nbgrader", {}).get("grade_id"): c for c in _cells(path)}


def _constants(tree: ast.Module) -> dict[str, object]:
    found: dict[str, object] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            found.update({t.id: value for t in node.targets})
    return found


def compiled_sources(notebook: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(name, source, options) of every ``course.cuda.compile`` call of a notebook, read as constants."""
    trees = []
    for cell in _cells(notebook):
        if cell.cell_type == "code":
            try:
                trees.append(ast.parse(cell.source))
            except SyntaxError:
                continue
    constants: dict[str, object] = {}
    for tree in trees:
        constants.update(_constants(tree))
    found = []
    for tree in trees:
        for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
            if not ast.unparse(call.func).endswith("cuda.compile") or not call.args:
                continue
            options_node = call.args[1] if len(call.args) > 1 else next(
                (k.value for k in call.keywords if k.arg == "options"), None)

            def constant(node: ast.expr | None) -> object:
                if node is None:
                    return ()
                return constants.get(node.id) if isinstance(node, ast.Name) else ast.literal_eval(node)

            source, options = constant(call.args[0]), constant(options_node)
            assert isinstance(source, str) and isinstance(options, tuple), \
                f"{notebook.name}: {ast.unparse(call)} is not given string constants"
            found.append((ast.unparse(call.args[0]), source, options))
    return found


def ladder_source(version: str) -> str:
    tree = ast.parse(_by_id(SOLUTION)[f"sgemm_{version}"].source.replace("### BEGIN SOLUTION", "")
                     .replace("### END SOLUTION", ""))
    return str(_constants(tree)[f"SGEMM_{version.upper()}"])


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/bin/nvcc", "/usr/local/cuda/bin/nvcc")
                                         if Path(p).exists()), None)


# ---------------------------------------------------------------------------------------------- sources

def test_every_course_cuda_source_compiles_for_sm90(tmp_path):
    sources = [(notebook, *found) for notebook in sorted((REPO / "solutions").rglob("*.ipynb"))
               for found in compiled_sources(notebook)]
    names = {(notebook.name, name) for notebook, name, _, _ in sources}
    assert {(SOLUTION.name, f"SGEMM_{v.upper()}") for v in VERSIONS} <= names, "the source search is broken"
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip(f"nvcc not found: {len(sources)} CUDA sources of the course were NOT compiled (not a pass)")
    failures = []
    for i, (notebook, name, source, options) in enumerate(sources):
        path = tmp_path / f"source{i}.cu"
        path.write_text(source)
        ran = subprocess.run([nvcc, "-arch=sm_90", "-cubin", "--resource-usage", *options,
                              "-o", str(tmp_path / f"source{i}.cubin"), str(path)],
                             capture_output=True, text=True, timeout=300)
        if ran.returncode:
            failures.append(f"{notebook.relative_to(REPO)} {name}: {ran.stderr[-1500:]}")
    assert not failures, "\n".join(failures)


def test_each_answer_cell_defines_its_source_and_launches_its_own_kernel():
    cells = _by_id(SOLUTION)
    for v in VERSIONS:
        cell = cells[f"sgemm_{v}"]
        assert cell.metadata.nbgrader["solution"] and not cell.metadata.nbgrader["grade"]
        source = ladder_source(v)
        assert 'extern "C" __global__ void __launch_bounds__' in source and f"sgemm_{v}(" in source
        assert f'get_function("sgemm_{v}")' in cell.source
        launch = re.search(rf"sgemm_{v}_kernels?(\[\w+\])?\(grid", cell.source)
        assert launch, f"{v}'s wrapper launches no kernel of its cell"


def test_the_student_notebook_ships_no_kernel():
    cells = _by_id(STUDENT)
    for v in VERSIONS:
        text = cells[f"sgemm_{v}"].source
        assert "raise NotImplementedError()" in text and "__global__" not in text
        assert f"SGEMM_{v.upper()} =" not in text
    assert "HIDDEN TESTS" not in json.dumps([c.source for c in _cells(STUDENT)])


# ------------------------------------------------------------------------------------------------ specs

def test_one_cuda_spec_per_version_wired_to_the_notebook():
    found = specs.for_notebook(ladder_specs.NOTEBOOK)
    assert [s.id for s in found] == sorted(f"w2x.sgemm_{v}" for v in VERSIONS)
    cells = _by_id(SOLUTION)
    for v in VERSIONS:
        spec = specs.get(f"w2x.sgemm_{v}")
        assert spec.language == "cuda" and spec.precision == "fp32-ieee" and spec.function == f"sgemm_{v}"
        assert spec.kernel_cells == (f"sgemm_{v}",) and spec.library_name == "cuBLAS"
        for grade_id in spec.correctness_cells:
            assert cells[grade_id].metadata.nbgrader["grade"]
        [threshold] = spec.thresholds
        assert cells[spec.grade_id(threshold)].metadata.nbgrader["points"] == threshold.points
        assert "TF32 off" in threshold.precision


def test_speed_bands_rise_with_the_rung():
    levels = [specs.get(f"w2x.sgemm_{v}").threshold("vs_cublas").full_level for v in VERSIONS]
    assert levels == sorted(levels) and len(set(levels)) == len(levels)
    assert levels[-1] < 1.0


def test_shapes_have_edges_everywhere():
    spec = ladder_specs.SPECS["v6b"]
    for shape_set in (spec.visible_shapes, spec.hidden_shapes):
        assert any(len(set(shape)) == 3 for shape in shape_set.gpu)  # non-square
        assert any(all(n % 4 for n in shape) for shape in shape_set.gpu)  # the scalar paths of v6a/v6b
    assert (1, 1, 1) in spec.visible_shapes.gpu
    assert (4097, 4095, 1023) in spec.hidden_shapes.gpu
    assert (4096, 4096, 4096) in spec.bench_shapes.gpu


def test_reference_and_inputs():
    spec = ladder_specs.SPECS["v3"]
    a = torch.tensor([[1.0, 2.0]])
    b = torch.tensor([[3.0], [4.0]])
    assert spec.reference((a, b)).item() == 11.0 and spec.reference((a, b)).dtype == torch.float64
    a1, b1 = spec.make_inputs((5, 7, 3), 1, "cpu")
    a2, _ = spec.make_inputs((5, 7, 3), 2, "cpu")
    assert a1.shape == (5, 3) and b1.shape == (3, 7) and not torch.equal(a1, a2) and a1.abs().sum() > 0


# --------------------------------------------------------------------------------------- CPU arithmetic

def test_global_traffic_per_version():
    n = 4096
    assert sgemm_ladder.global_floats("v1", n, n, n) == (n**3, n**3)
    assert sgemm_ladder.global_floats("v2", n, n, n) == (n**3 // 32, n**3)
    assert sgemm_ladder.global_floats("v3", n, n, n) == (n**3 // 32, n**3 // 32)
    assert sgemm_ladder.global_floats("v6b", 100, 300, 7) == (100 * 7 * 3, 7 * 300 * 1)
    assert sgemm_ladder.flop_per_global_float("v5", n, n, n) == pytest.approx(128.0)


def test_passes_model():
    assert sgemm_ladder.passes([[5]] * 32) == 1  # one word for the whole warp: a broadcast
    assert sgemm_ladder.passes([[lane] for lane in range(32)]) == 1
    assert sgemm_ladder.passes([[lane * 32] for lane in range(32)]) == 32
    assert sgemm_ladder.passes([[4 * lane + i for i in range(4)] for lane in range(32)]) == 4  # 512 bytes
    assert sgemm_ladder.passes([[(lane % 4) * 32 + i for i in range(4)] for lane in range(32)]) == 4


def test_inner_loop_passes_show_v6b_removing_the_conflict():
    v5, v6b = sgemm_ladder.inner_loop_passes("v5"), sgemm_ladder.inner_loop_passes("v6b")
    assert v5["A"] == (8, 32) and v5["B"] == (8, 8)
    assert v6b["A"] == (2, 2) and v6b["B"] == (2, 2)
    assert sgemm_ladder.inner_loop_passes("v7") == {"A": (2, 2), "B": (4, 4)}  # 6 reads for 128 FMAs
    assert sgemm_ladder.inner_loop_passes("v3") == {"A": (1, 1), "B": (1, 1)}


def test_progression_rows_compare_rungs_only():
    rows = sgemm_ladder.progression_rows({"v1": 100.0, "v2": None, "v3": 300.0, "v4": 600.0, "Triton": 900.0}, 1000.0)
    by = {r["version"]: r for r in rows}
    assert by["v1"]["vs_cublas"] == pytest.approx(0.1) and by["v1"]["vs_previous"] is None
    assert by["v3"]["vs_previous"] is None and by["v4"]["vs_previous"] == pytest.approx(2.0)
    assert by["Triton"]["vs_previous"] is None and by["Triton"]["vs_cublas"] == pytest.approx(0.9)
    assert "not measured" in sgemm_ladder.format_progression(rows)


# ------------------------------------------------------------------------------------------- provenance

def _cuda_launch(source: str, name: str) -> dict:
    return {"kernel": name, "cuda": {"source_sha256": cuda.source_digest(source), "options": []},
            "grid": [1, 1, 1], "block": [32, 1, 1], "shared_mem": 0, "arguments": []}


def _fixture_notebook(name: str) -> dict:
    return apply(fixtures([f"bonus_sgemm_ladder-{name}"])[f"bonus_sgemm_ladder-{name}"],
                 released_notebook(ladder_specs.NOTEBOOK))


def test_a_version_counts_only_kernels_of_its_own_cell():
    honest = nbformat.from_dict(_fixture_notebook("honest_ladder")).cells
    allowed = provenance.allowed_kernels(honest, ("sgemm_v6b",))
    assert allowed.cuda == {cuda.source_digest(ladder_source("v6b"))}
    assert provenance.foreign_launch({"launches": [_cuda_launch(ladder_source("v6b"), "sgemm_v6b")]}, allowed) is None
    refused = provenance.foreign_launch({"launches": [_cuda_launch(ladder_source("v3"), "sgemm_v3")]}, allowed)
    assert "sgemm_v3" in refused and "'sgemm_v6b'" in refused
    both = [_cuda_launch(ladder_source("v6b"), "sgemm_v6b"), _cuda_launch(ladder_source("v3"), "sgemm_v3")]
    assert provenance.foreign_launch({"launches": both}, allowed)  # one foreign launch is enough
    assert provenance.foreign_launch({"launches": [{"kernel": "matmul_kernel"}]}, allowed)  # Triton, not defined
    assert provenance.foreign_launch({"launches": ["junk"]}, allowed)


def test_a_copy_made_at_run_time_or_borrowed_is_refused_and_a_literal_copy_is_not():
    v3_renamed = ladder_source("v3").replace("sgemm_v3", "sgemm_v6b")
    plan = {"launches": [_cuda_launch(v3_renamed, "sgemm_v6b")]}
    runtime = nbformat.from_dict(_fixture_notebook("v3_renamed_at_runtime")).cells
    assert provenance.foreign_launch(plan, provenance.allowed_kernels(runtime, ("sgemm_v6b",)))
    borrowed = nbformat.from_dict(_fixture_notebook("v3_kernel_for_v6b")).cells
    assert provenance.allowed_kernels(borrowed, ("sgemm_v6b",)).cuda == set()
    literal = nbformat.from_dict(_fixture_notebook("v3_copied_into_v6b")).cells
    assert provenance.foreign_launch(plan, provenance.allowed_kernels(literal, ("sgemm_v6b",))) is None


def test_the_gpu_judge_fails_every_shape_of_a_foreign_launch(tmp_path):
    # The provenance check runs before anything touches the GPU, so this part of the judge runs here.
    notebook = tmp_path / "sanitized.ipynb"
    nbformat.write(nbformat.from_dict(_fixture_notebook("v3_kernel_for_v6b")), str(notebook))
    plan = {"version": 2, "problems": [], "launches": [_cuda_launch(ladder_source("v3"), "sgemm_v3")]}
    spec = ladder_specs.SPECS["v6b"]
    calls = [{"key": "v0", "set": "visible", "shape": [127, 129, 131], "seed": 1},
             {"key": "h0", "set": "hidden", "shape": [5, 3001, 2], "seed": 2}]
    export = {"kernels": {spec.id: {"calls": {c["key"]: {"plan": plan} for c in calls}}}}
    verdict = on_gpu._judge_spec(spec, {"calls": calls, "bench_shapes": []},
                                {"notebook": str(notebook), "run_seed": 7, "student": "s"}, export, None, {}, None)
    for which in ("visible", "hidden"):
        shape_set = verdict["sets"][which]
        assert not shape_set["passed"] and "not a string constant of the answer cell" in shape_set["messages"][0]


# ------------------------------------------------------------------------------------ CPU emulation of CUDA

EMULATION = r"""
// CUDA's block model on the CPU: one std::thread per CUDA thread, one block at a time,
// __syncthreads as a barrier, __shared__ variables as function statics (one block at a time).
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <thread>
#include <vector>
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
inline std::barrier<>* emu_barrier = nullptr;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
inline void __syncthreads() { emu_barrier->arrive_and_wait(); }
struct alignas(16) float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
using std::min; using std::max;
#include "kernel.cu"

int main(int argc, char** argv) {
    const int M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]), off = atoi(argv[4]);
    void *ab, *bb, *cb;  // exact sizes: the sanitizer sees any access past an end
    if (posix_memalign(&ab, 16, sizeof(float) * ((size_t)M * K + off)) ||
        posix_memalign(&bb, 16, sizeof(float) * ((size_t)K * N + off)) ||
        posix_memalign(&cb, 16, sizeof(float) * (size_t)M * N)) return 2;
    float* A = static_cast<float*>(ab) + off; float* B = static_cast<float*>(bb) + off;
    float* C = static_cast<float*>(cb);
    std::mt19937 gen(M * 131 + N * 7 + K);
    std::normal_distribution<float> dist;
    for (size_t i = 0; i < (size_t)M * K; ++i) A[i] = dist(gen);
    for (size_t i = 0; i < (size_t)K * N; ++i) B[i] = dist(gen);
    for (size_t i = 0; i < (size_t)M * N; ++i) C[i] = NAN;
    const dim3 grid((N + TILE_N - 1) / TILE_N, (M + TILE_M - 1) / TILE_M), block(BX, BY);
    gridDim = grid; blockDim = block;
    for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bar(BX * BY);
        emu_barrier = &bar;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < BX * BY; ++t)
            threads.emplace_back([=] {
                blockIdx = dim3(bx, by); threadIdx = dim3(t % BX, t / BX);
                KERNEL(A, B, C, M, N, K);
            });
        for (auto& th : threads) th.join();
    }
    double num = 0, den = 0;
    for (int i = 0; i < M; ++i) for (int j = 0; j < N; ++j) {
        double ref = 0;
        for (int k = 0; k < K; ++k) ref += (double)A[(size_t)i * K + k] * B[(size_t)k * N + j];
        num += (C[(size_t)i * N + j] - ref) * (C[(size_t)i * N + j] - ref); den += ref * ref;
    }
    printf("%.3e\n", std::sqrt(num / den));  // NaN (an unwritten element) prints nan
    free(ab); free(bb); free(cb);
    return 0;
}
"""
EMULATED_SHAPES = {  # (M, N, K, misalignment of A and B in floats)
    "small": [(1, 1, 1, 0), (33, 65, 17, 0), (70, 45, 37, 1)],
    "tiled": [(1, 1, 1, 0), (130, 131, 33, 1), (260, 300, 72, 0), (129, 260, 70, 0), (3, 300, 5, 0)],
}


def test_every_version_is_launched_in_these_tests():
    assert {version for version, *_ in LAUNCHES} == set(VERSIONS)


@pytest.mark.slow
@pytest.mark.parametrize(("version", "options", "tile_m", "tile_n", "block", "shared_bytes"), LAUNCHES, ids=LAUNCH_IDS)
def test_ladder_kernel_in_a_cpu_emulation_of_cuda_blocks(tmp_path, version, options, tile_m, tile_n, block,
                                                        shared_bytes):
    compiler = shutil.which("g++")
    if compiler is None:
        pytest.skip("g++ not found: the CPU emulation of the ladder's kernels NOT RUN (not a pass)")
    bx, by = block
    source = ladder_source(version)
    if shared_bytes:  # dynamic shared memory: a static array of the launch's size (one block at a time)
        assert DYNAMIC_SHARED in source
        source = source.replace(DYNAMIC_SHARED, f"static __align__(16) float smem[{shared_bytes // 4}];")
    (tmp_path / "kernel.cu").write_text(source)
    (tmp_path / "main.cpp").write_text(EMULATION)
    built = subprocess.run([compiler, "-std=c++20", "-O1", "-w", "-pthread", "-fno-strict-aliasing",
                            "-fsanitize=address,alignment,undefined", "-fno-sanitize-recover=all",
                            f"-DKERNEL=sgemm_{version}", f"-DTILE_M={tile_m}", f"-DTILE_N={tile_n}",
                            f"-DBX={bx}", f"-DBY={by}", *options,
                            "-o", str(tmp_path / "run"), str(tmp_path / "main.cpp")],
                           capture_output=True, text=True, timeout=300)
    if built.returncode and "sanitize" in built.stderr and "cannot find" in built.stderr:
        pytest.skip("g++ has no sanitizer runtime here: the CPU emulation NOT RUN (not a pass)")
    assert built.returncode == 0, built.stderr[-2000:]
    for m, n, k, off in EMULATED_SHAPES["small" if version in ("v1", "v2", "v3", "v4") else "tiled"]:
        ran = subprocess.run([str(tmp_path / "run"), str(m), str(n), str(k), str(off)],
                             capture_output=True, text=True, timeout=300)
        assert ran.returncode == 0, f"{version} {m}x{n}x{k}: {ran.stderr[-1500:]}"
        assert float(ran.stdout) <= 1e-5, f"{version} {m}x{n}x{k} (offset {off}): relative error {ran.stdout}"


# ------------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
@pytest.mark.parametrize(("version", "options", "tile_m", "tile_n", "block", "shared_bytes"), LAUNCHES, ids=LAUNCH_IDS)
def test_ladder_kernel_on_the_gpu(version, options, tile_m, tile_n, block, shared_bytes):
    kernel = cuda.compile(ladder_source(version), options).get_function(f"sgemm_{version}")
    for m, n, k in [(1, 1, 1), (127, 129, 131), (1000, 1030, 515), (5, 3001, 2)]:
        for offset in (0, 1):  # offset 1: A and B start 4 bytes past a 16-byte boundary
            a = torch.randn(m * k + offset, device="cuda")[offset:].view(m, k)
            b = torch.randn(k * n + offset, device="cuda")[offset:].view(k, n)
            c = torch.full((m, n), float("nan"), device="cuda")
            kernel((cuda.cdiv(n, tile_n), cuda.cdiv(m, tile_m)), block,
                   (a, b, c, np.int32(m), np.int32(n), np.int32(k)), shared_mem=shared_bytes)
            torch.cuda.synchronize()
            reference = a.double() @ b.double()
            error = float(torch.linalg.vector_norm(c.double() - reference) / torch.linalg.vector_norm(reference))
            assert error <= 1e-5, f"{version} {m}x{n}x{k} offset {offset}: relative error {error:.2e}"


def test_the_recorded_registers_and_spills_are_the_sweep_s():
    import json
    from pathlib import Path

    from course.days import sgemm_ladder

    path = Path(__file__).resolve().parent.parent / "bench/results/h200/2026-11-28-sgemm-ladder-tiles-d6f60bb.json"
    sweep = json.loads(path.read_text(encoding="utf-8"))["sweep"]
    as_built = {(row["version"], row["registers"], row["local_bytes"]) for row in sweep
                if tuple(row.get(key) for key in ("BK", "WARPS_M", "WARPS_N", "MIN_BLOCKS")) == (8, 4, 2, 2)}
    for version, (registers, spilled) in sgemm_ladder.RECORDED_RESOURCES["kernels"].items():
        assert (version, registers, spilled) in as_built
    table = sgemm_ladder.format_resources({"v5": (128, 8), "v1": None})
    assert "128" in table and "spills" in table and table.splitlines()[-1].split()[1:] == ["-", "-"]
