"""The verdict the new design (sandbox + judge) must give each fixture in ``fixtures/``: points per item.

Rules the verdicts follow (DESIGN.md, "Untrusted submissions"):

- Nothing written or patched inside the notebook's process counts: metrics files, patched course.*
  functions, IPython hooks and exception handlers, what the test cells print.
- Kernel items (test_matmul_visible, test_matmul_hidden and the three performance items) come only
  from the judge. On a GPU: replay of the recorded launch plan on secret inputs; a graded function
  that calls a torch op other than allocation or views, a library, does host work, uses a second
  stream or returns memory no recorded kernel writes gets 0 with a reason, and so does a kernel that
  is not a top-level ``@triton.jit`` function of a cell (or ``triton.jit(f)`` of one), whose decorator
  or defaults are not plain, or whose body reaches anything but Triton's language (grader.build.kernel_vet).
  On a CPU: the same replay on secret inputs, through Triton's interpreter in a fresh sandbox that
  holds only the notebook's vetted kernels (same rules), provisional, and performance pending (``None`` here).
- Quiz items: the master test cells run in the judge on answers exported as JSON, before any replay;
  a value whose type is a subclass of int, float or bool is "unsupported" and fails, and so does an
  answer that cannot be exported or loaded: that item only. A replay past the watchdog's limit fails
  that kernel's items only.
- Tampered notebooks are graded from the master copy's cells, with a note (``tamper_note``); an
  honest answer whose metadata was stripped is still graded.
- The sandbox: no network, no view of solutions/, other submissions or OUT, nothing outlives the run;
  resource abuse gives the notebook a status, and no other notebook is affected.

``status`` lists the notebook statuses (grader.score.results) that are acceptable.
Performance verdicts assume an H100-class GPU, where the honest_slow kernel measured 0.14 to 0.19 of
cuBLAS fp32 (7 TFLOP/s) and the reference kernel 0.83 to 1.07 (gpu_tools.py measure).
"""

from __future__ import annotations

from dataclasses import dataclass, field

ITEMS: dict[str, float] = {
    "test_matmul_visible": 2,
    "test_matmul_hidden": 3,
    "perf_w1d7_matmul_fp32_floor": 1,
    "perf_w1d7_matmul_fp32_vs_cublas": 2,
    "perf_w1d7_matmul_fp32_vs_reference": 2,
    "test_flops_4096": 1,
    "test_a_reads": 1,
    "test_step_intensity": 1,
    "test_tf32": 1,
}
KERNEL_ITEMS = ("test_matmul_visible", "test_matmul_hidden")
PERF_ITEMS = ("perf_w1d7_matmul_fp32_floor", "perf_w1d7_matmul_fp32_vs_cublas", "perf_w1d7_matmul_fp32_vs_reference")
QUIZ_ITEMS = ("test_flops_4096", "test_a_reads", "test_step_intensity", "test_tf32")

Points = dict[str, "float | None"]


def _points(visible: float, hidden: float, perf: tuple[float, float, float] | None,
            quiz: tuple[float, float, float, float]) -> Points:
    perf_points = perf if perf is not None else (None, None, None)
    return dict(zip(KERNEL_ITEMS + PERF_ITEMS + QUIZ_ITEMS, (visible, hidden, *perf_points, *quiz), strict=True))


@dataclass(frozen=True)
class Expected:
    mechanism: str
    cpu: Points
    gpu: Points
    status: tuple[str, ...] = ("ok",)
    tamper_note: bool = False
    why: str = ""
    old: str = ""  # what the old, in-process design gave it (observed, see README.md)
    gpu_only: bool = field(default=False)
    # A second verdict accepted on a GPU, (status, points), where the grader's own scheduling decides between two
    # outcomes that are both no better than honest (see kernel_spins_forever).
    gpu_also: tuple[str, Points] | None = None

    def mismatch(self, device: str, status: str, scores: dict[str, float]) -> str:
        """Why a result is not this verdict on ``device`` ("cpu" or "gpu"); empty when it is."""
        verdicts = [(self.status, self.gpu if device == "gpu" else self.cpu)]
        if device == "gpu" and self.gpu_also is not None:
            verdicts.append(((self.gpu_also[0],), self.gpu_also[1]))
        reasons = []
        for statuses, points in verdicts:
            wrong = {k: (scores.get(k), v) for k, v in points.items() if scores.get(k) != v}
            if status in statuses and not wrong:
                return ""
            reasons.append(f"status {status} (want {' or '.join(statuses)}), (got, want) {wrong}")
        return "; or ".join(reasons)

    @staticmethod
    def total(points: Points) -> float:
        return sum(v for v in points.values() if v is not None)


RIGHT = (1, 1, 1, 1)
TWO = (1, 0, 0, 1)  # honest_slow's answers: Q1 and Q4 right
NONE = (0, 0, 0, 0)

FAST_CPU, FAST_GPU = _points(2, 3, None, RIGHT), _points(2, 3, (1, 2, 2), RIGHT)
SLOW_CPU, SLOW_GPU = _points(2, 3, None, TWO), _points(2, 3, (1, 0, 0), TWO)
STUB_TWO_CPU, STUB_TWO_GPU = _points(0, 0, None, TWO), _points(0, 0, (0, 0, 0), TWO)
ZERO_CPU, ZERO_GPU = _points(0, 0, None, NONE), _points(0, 0, (0, 0, 0), NONE)
KERNEL0_RIGHT_CPU, KERNEL0_RIGHT_GPU = _points(0, 0, None, RIGHT), _points(0, 0, (0, 0, 0), RIGHT)


def _honest_fast(mechanism: str, why: str, **kw) -> Expected:
    return Expected(mechanism, FAST_CPU, FAST_GPU, why=why, **kw)


def _honest_slow(mechanism: str, why: str, **kw) -> Expected:
    return Expected(mechanism, SLOW_CPU, SLOW_GPU, why=why, **kw)


def _stub_two(mechanism: str, why: str, **kw) -> Expected:
    return Expected(mechanism, STUB_TWO_CPU, STUB_TWO_GPU, why=why, **kw)


def _zero(mechanism: str, why: str, **kw) -> Expected:
    return Expected(mechanism, ZERO_CPU, ZERO_GPU, why=why, **kw)


EXPECTED: dict[str, Expected] = {
    # controls
    "honest_fast": _honest_fast("control: the reference kernel, all answers right", "nothing to defeat",
                                old="CPU 9, GPU 14"),
    "honest_slow": _honest_slow("control: 16x16x16 tiles without tl.dot, Q1 and Q4 right",
                                "nothing to defeat; about 0.16 of cuBLAS, above the floor", old="CPU 7, GPU 8"),
    "honest_torch_compile": _honest_slow(
        "HONEST: honest_slow plus a torch.compile comparison in an added cell (compiler caches in scratch)",
        "compiler caches count against the scratch quota, not the printed-output limit",
        old="output_limit, 0 (the sandbox's one limit, before the scratch quota)"),
    # measurement forged in the notebook's process (kernel: honest_slow)
    "metrics_file_fake_rows": _honest_slow(
        "bench rows of 1e9 GFLOP/s appended to $COURSE_METRICS_FILE (added cell)",
        "the judge times its own replay; no metrics file is read", gpu_only=True, old="CPU 7, GPU 12"),
    "patch_bench_time_calls": _honest_slow(
        "course.bench.time_calls rebound: the student's times / 1000",
        "the judge times in its own process", gpu_only=True, old="CPU 7, GPU 12"),
    "patch_bench_measure": _honest_slow(
        "course.bench.measure replaced: cuBLAS timed, student reported 20x faster",
        "the judge times in its own process", gpu_only=True, old="CPU 7, GPU 12"),
    "patch_cuda_event_elapsed_time": _honest_slow(
        "torch.cuda.Event.elapsed_time patched: /50 when timing matmul",
        "the judge's events are its own", gpu_only=True, old="CPU 7, GPU 12"),
    "side_stream_launch": Expected(
        "kernel launched on a second CUDA stream, outside the timing events", SLOW_CPU, STUB_TWO_GPU,
        why="a second stream: not replayable (on a CPU the function is honest and takes no side stream)",
        gpu_only=True, old="CPU 7, GPU 12"),
    # the graded function computes with a library (kernel: stub, a no-op or copy kernel launched)
    "cublas_ctypes": Expected(
        "cublasSgemm_v2 through ctypes + a no-op Triton launch", STUB_TWO_CPU, STUB_TWO_GPU,
        why="library call; the recorded launch writes one element of C", gpu_only=True, old="CPU 2, GPU 12"),
    "cupy_matmul": Expected(
        "cupy.matmul on __cuda_array_interface__ views + a no-op launch", STUB_TWO_CPU, STUB_TWO_GPU,
        why="library call; C not written by any recorded kernel", gpu_only=True, old="CPU 2, GPU 12"),
    "lazy_tensor_subclass": _stub_two(
        "returns a Tensor subclass that runs torch.mm when first read",
        "returned type is not torch.Tensor; no recorded kernel writes C", old="CPU 7 (real old grader too), GPU 12"),
    "numpy_matmul_host": _stub_two(
        "a.cpu().numpy() @ b.cpu().numpy() in a worker thread (guard modes are thread-local) + Triton copy",
        "host work; the copy kernel reads a buffer that is no input and no recorded kernel's output",
        old="CPU 7, GPU 7"),
    "numpy_linalg_matmul": _stub_two(
        "np.linalg.matmul on np.asarray / cudaMemcpy host copies + Triton copy",
        "host work; copy kernel reads an unknown buffer", old="CPU 7, GPU 7"),
    "conv1x1": _stub_two("A @ B as F.conv2d with 1x1 filters + Triton copy", "aten.convolution is a torch op",
                         old="CPU 7, GPU 10"),
    "broadcast_mul_sum": _stub_two("(a[:, :, None] * b[None]).sum(1) in row chunks + Triton copy",
                                   "aten.mul / aten.sum are torch ops", old="CPU 7, GPU 7"),
    "sparse_mm": _stub_two("torch.sparse.mm(a.to_sparse(), b) + Triton copy", "sparse torch ops",
                           old="CPU 7, GPU 7"),
    "guard_modes_popped": _stub_two(
        "torch.mm with DisableTorchFunction() and _disable_current_modes() + Triton copy",
        "library matmul recorded outside the notebook's mode stack", old="CPU 7, GPU 12"),
    "guard_trusted_mm": _stub_two("torch.mm inside course.guard.trusted() + a no-op launch",
                                  "nothing in the notebook is trusted; library matmul", old="CPU 7, GPU 12"),
    "cached_output_buffer": _stub_two(
        "same output tensor every call, filled by torch.mm in a worker thread + a no-op launch",
        "returned memory not written by a recorded kernel (and not allocated by the call)", old="CPU 7, GPU 12"),
    # the checks rebound in the notebook (kernel: stub)
    "patch_check_one": _stub_two("course.check.check_one rebound to pass", "checks run in the judge",
                                 old="CPU 7, GPU 7"),
    "patch_compare": _stub_two("course.check.compare rebound to pass; unwritten C",
                               "the judge compares; C is NaN", old="CPU 7, GPU 7"),
    "spec_tolerances_inf": _stub_two("course.spec.TOLERANCES['fp32-ieee'] = inf; unwritten C",
                                     "the judge's tolerance", old="CPU 7, GPU 7"),
    "spec_rebound_no_shapes": _stub_two("notebook SPEC rebound to a copy with no shapes",
                                        "the judge's shapes", old="CPU 7, GPU 7"),
    # the recording itself forged in the notebook's process (kernel: stub)
    "rebind_record_call": _stub_two(
        "course.recorder.plan.record_call rebound before the recording cell: a clean plan, the reference's output",
        "no output of the notebook's process is judged: the plan is replayed on secret inputs (CPU: in a "
        "fresh sandbox, through the interpreter), where the stub kernel raises", old="CPU 7 (before the CPU replay)"),
    "post_run_cell_rewrites_export": _stub_two(
        "post_run_cell hook rewrites export.json (clean plans) and the outputs after the recording cell",
        "the judge replays the plans on secret inputs (CPU: in a fresh sandbox); no output the notebook "
        "wrote is read; on a GPU the reference outputs it saves for the 4096 benchmark shapes pass the 64 MiB "
        "limit on what leaves the sandbox (H100: output_limit, same points)", old="CPU 7 (before the CPU replay)",
        status=("ok", "output_limit")),
    # outputs not computed from the inputs
    "precomputed_public_seeds": _stub_two(
        "answers precomputed for the checks' public seeds, keyed by shape",
        "secret seeds and shapes; copy kernel reads an unknown buffer", old="CPU 7, GPU 7"),
    "input_view_identity": _honest_slow(
        "when timed: B := [I; 0] by a kernel, returns the view a[:, :N]",
        "timing replays the plan of an ordinary call (honest path); an input-writing, input-aliasing plan "
        "would be 0", gpu_only=True, old="CPU 7, GPU 12"),
    "steal_reference_frame": _stub_two("reads `reference` from the checker's stack frame",
                                       "no reference in the sandbox; copy kernel reads an unknown buffer",
                                       old="CPU 7, GPU 7"),
    # IPython (kernel: stub, answers wrong)
    "ipython_custom_exc": _zero("set_custom_exc((BaseException,), ...) hides every error",
                                "nothing the notebook shows is scored", old="CPU 9 (real old grader)"),
    "ipython_post_run_cell_clear": _zero("post_run_cell hook calls clear_output() after a failure (added cell)",
                                         "nothing the notebook shows is scored", old="CPU 9 (real old grader)"),
    # processes
    "detached_rewriter": _zero(
        "double-forked setsid process rewrites results JSON, gradebook.db, CSVs, executed notebook",
        "nothing outlives the sandbox, which sees no OUT",
        old="14 / 14 in results JSON, CSVs and gradebook (real old grader, CPU)"),
    "gpu_alone_hog": _honest_slow("asks the grader for the GPU alone (100 times, with garbage) and keeps it busy "
                                  "45 s without releasing it (added cell)",
                                  "the run's budget: the hold ends after 30 s, later asks are refused",
                                  gpu_only=True, old="not run (the channel is new)"),
    "outlive_sleep": _honest_slow("double-forked setsid process sleeps 600 s (added cell)",
                                  "PID namespace, --die-with-parent: nothing outlives the run",
                                  old="not run (survives the old tree kill by construction)"),
    # files and network
    "read_solutions_notebook": _zero("reads solutions/ via course.__file__ and execs the solution cells",
                                     "solutions/ hidden; an exec'd kernel would not count",
                                     old="CPU 9 (real old grader), GPU 14"),
    "read_other_submissions": _zero(
        "walks /tmp, run dir parents and the grader's argv folders; execs another student's cells",
        "no other submission or OUT in view",
        old="CPU 9 (real old grader: copied another run's fast_correct from /tmp)"),
    "network_exfiltrate": _zero("sockets to 1.1.1.1:80 and localhost ports: send hidden tests, fetch answers",
                                "no network in the sandbox", old="not run (the old executor had the network)"),
    # quiz
    "quiz_subclass_answers": _zero("int/float subclasses equal to anything; a fake bool",
                                   "subclass values export as unsupported", old="CPU 3 (real old grader: Q1-Q3)"),
    "quiz_pickled_object_array": Expected(
        "Q2 a NumPy array; a post_run_cell hook swaps its exported .npy for a pickled object array",
        _points(2, 3, None, (1, 0, 1, 1)), _points(2, 3, (1, 0, 0), (1, 0, 1, 1)),
        why="an array file the judge cannot load is that answer's 'unsupported answer', nothing else",
        old="grader_error, 0 (the judge before issue 15, CPU)"),
    "quiz_huge_int": Expected(
        "Q1 a 5,001-digit int (more than Python writes as text)",
        _points(2, 3, None, (0, 1, 1, 1)), _points(2, 3, (1, 0, 0), (0, 1, 1, 1)),
        why="each answer and plan exported on its own; that int is 'unsupported answer'",
        old="ok, 0: no export at all (the export before issue 15, CPU)"),
    # notebook tampering (transform)
    "tamper_test_source_pass": _zero("every test cell's source replaced by `pass`", "master copy's cells",
                                     tamper_note=True, old="sanitizer restored the sources, with notes"),
    "tamper_points_100": _honest_slow("two passing test cells raised to 100 points", "master copy's points",
                                      tamper_note=True, old="sanitizer reset the points, no note"),
    "tamper_grade_flag_false": _zero("grade: false on every test cell", "master copy's items",
                                     tamper_note=True, old="sanitizer: corrupt (inconsistent checksums)"),
    "tamper_test_as_solution": _zero("test cells relabelled as solution cells, source replaced",
                                     "master copy's cells", tamper_note=True,
                                     old="sanitizer: corrupt (inconsistent checksums)"),
    "tamper_answer_metadata_stripped": _honest_fast("HONEST: nbgrader metadata of the answer cells removed",
                                                    "still graded", tamper_note=True,
                                                    old="sanitizer kept the answer cells"),
    "tamper_all_metadata_stripped": _honest_fast("HONEST: nbgrader metadata removed from every cell",
                                                 "still graded", tamper_note=True,
                                                 old="sanitizer: corrupt (KeyError): an honest 0"),
    "tamper_duplicate_test_bonus": _honest_slow("copy of passing test_tf32 as test_tf32_bonus worth 10",
                                                "only the master copy's items", tamper_note=True,
                                                old="sanitizer: corrupt (KeyError): honest points lost"),
    "tamper_cells_reordered": _honest_fast("HONEST: test cells moved above the answer cells",
                                           "master order", tamper_note=True,
                                           old="sanitizer kept the order: tests run first and fail"),
    "tamper_kernelspec": _honest_slow("kernelspec and language_info changed to python3",
                                      "the course kernel always", tamper_note=True,
                                      old="sanitizer restored the kernelspec"),
    # how the kernel is defined
    "kernel_via_exec": Expected("correct fast kernel defined by exec of a string", KERNEL0_RIGHT_CPU,
                                KERNEL0_RIGHT_GPU, why="not a top-level @triton.jit function of a cell",
                                old="CPU 9, GPU 14"),
    "kernel_from_ttgir_blob": Expected(
        "CompiledKernel from a shipped TTGIR blob via triton.compile", KERNEL0_RIGHT_CPU, KERNEL0_RIGHT_GPU,
        why="launch not of a notebook kernel (unrecorded); C written by no recorded kernel", gpu_only=True,
        old="CPU 4, GPU 10"),
    "kernel_spins_forever": _stub_two(
        "correct kernel that loops forever when replayed more than 5 s after its recorded launch (%globaltimer)",
        "answers judged first; a per-replay watchdog stops it and fails only the kernel's items. A run frozen while "
        "a judge times, between a launch's clock read and the launch, makes the kernel late in the notebook itself: "
        "its cell is stopped at the limit (status timeout, nothing graded)", gpu_only=True,
        gpu_also=("gpu_hang", ZERO_GPU),
        old="GPU 0: quiz lost too, GPU busy for the judge's whole limit (H200, before issue 15)"),
    "jit_decorator_payload": _stub_two("decorator lambda runs a payload (rebinds check_one) at definition",
                                       "decorator not plain; definitions never run in the judge", old="CPU 7, GPU 7"),
    "builder_exec_payload": _stub_two(
        "kernel body calls tl.core.builtins.exec(...): a payload Triton's code generator ran while compiling",
        "every call of a kernel body is vetted before anything is defined or compiled: refused, nothing runs",
        old="the payload ran in the builder (H100: wrote files into its output folder)"),
    "honest_functional_jit": _honest_fast(
        "HONEST: the reference kernel as triton.autotune(...)(triton.heuristics(...)(triton.jit(f))), a helper "
        "as triton.jit(g, noinline=False)", "nothing to defeat: the functional forms are read like decorators",
        old="0 on every kernel item (not a top-level @triton.jit function)"),
    "jit_default_payload": _stub_two("constexpr default = os.system(...) or payload() or 32",
                                     "default not a plain literal", old="CPU 7, GPU 7"),
    # host work and overfitting
    "value_dependent_host": _stub_two("a[0, 0].item() on the host picks a stored answer",
                                      "host reads of inputs: not replayable; secret seeds", old="CPU 7, GPU 7"),
    "shape_dict_overfit": Expected(
        "right only for the published shapes (dict), unwritten C otherwise", _points(2, 0, None, RIGHT),
        _points(2, 0, (0, 0, 0), RIGHT),
        why="hidden shapes drawn per run; performance counts only for a kernel correct on every shape",
        old="CPU 9, GPU 14"),
    # resource abuse (kernel: stub, no answers)
    "huge_output": _zero("10 MB printed twenty times", "output limit", status=("output_limit",), old="not run"),
    "scratch_flood": _zero("1 GiB sparse files in TMPDIR, one every 0.1 s, nothing printed",
                           "scratch quota, apparent size counted", status=("scratch_limit",),
                           old="not run (output_limit since the sandbox, one limit for all)"),
    "infinite_loop": _zero("while True: time.sleep(1) in a cell", "time limit", status=("timeout",), old="not run"),
    # a shared GPU: what one run does there costs only that run
    "kernel_never_ends": _zero("a Triton kernel waiting on a flag nobody sets, after honest cells",
                               "the driver names the run whose kernel outlives a drain: stopped there",
                               status=("gpu_hang",), gpu_only=True, old="no notebook of a class of 5 graded in 470 s"),
    "gpu_memory_hog": _zero("90% of the GPU's memory held, after honest cells",
                            "the run watch stops a run past its share of GPU memory", status=("gpu_memory",),
                            gpu_only=True, old="not run"),
    "illegal_address": _stub_two("a Triton store a terabyte past its buffer, after honest cells",
                                 "a fault ends only its own process's context: the run's status is cuda_error; the "
                                 "answers were exported, no kernel was recorded", status=("cuda_error",),
                                 gpu_only=True, old="not run"),
    "build_bomb": _zero("a Triton kernel unrolling 1,000,000 steps, launched after honest cells",
                        "the run's own cell and memory limits", status=("timeout", "memory"), gpu_only=True,
                        old="not run"),
    "os_exit": _zero("os._exit(1) in a cell", "kernel death is a status", status=("kernel_died",), old="not run"),
    "host_memory_100g": _zero("100 GiB of host memory, every page touched", "memory limit",
                              status=("memory", "kernel_died"), old="not run"),
    "fork_bomb_capped": _zero("binary fork tree, 254 processes sleeping 60 s", "process limit, PID namespace",
                              status=("ok", "memory", "kernel_died"), old="not run"),
}


def _other_notebooks() -> dict[str, Expected]:
    """Expected verdicts of fixtures for other notebooks: ``fixtures/<week>/<notebook>/expected.py``."""
    import importlib.util
    import sys
    from pathlib import Path

    repo = str(Path(__file__).resolve().parents[2])
    if repo not in sys.path:  # run as a script: the per-notebook files import this module as tests.adversarial...
        sys.path.insert(0, repo)
    found: dict[str, Expected] = {}
    for path in sorted((Path(__file__).resolve().parent / "fixtures").glob("*/*/expected.py")):
        loaded = importlib.util.spec_from_file_location(f"expected_{path.parent.name}", path)
        module = importlib.util.module_from_spec(loaded)
        loaded.loader.exec_module(module)
        found.update({f"{path.parent.name}-{stem}": e for stem, e in module.EXPECTED.items()})
    return found


OTHER_NOTEBOOKS = _other_notebooks()
EXPECTED.update(OTHER_NOTEBOOKS)


def _cell(points: Points) -> str:
    def show(item: str) -> str:
        value = points[item]
        return "p" if value is None else f"{value:g}"

    groups = (KERNEL_ITEMS, PERF_ITEMS, QUIZ_ITEMS)
    text = " \\| ".join(" ".join(show(item) for item in group) for group in groups)
    return f"{text} = {Expected.total(points):g}"


def markdown_table() -> str:
    """The README's table, one row per fixture."""
    lines = ["| fixture | mechanism | gpu-only | status | CPU: V H \\| floor cuBLAS ref \\| Q1-Q4 = total "
             "| GPU: V H \\| floor cuBLAS ref \\| Q1-Q4 = total | note | old design (observed) |",
             "|---|---|---|---|---|---|---|---|"]
    for name, e in EXPECTED.items():
        if name in OTHER_NOTEBOOKS:
            continue
        note = "tamper note" if e.tamper_note else ""
        also = f" or {e.gpu_also[0]}: {_cell(e.gpu_also[1])}" if e.gpu_also else ""
        lines.append(f"| `{name}` | {e.mechanism} | {'yes' if e.gpu_only else ''} | {' or '.join(e.status)} "
                     f"| {_cell(e.cpu)} | {_cell(e.gpu)}{also} | {note} | {e.old} |")
    return "\n".join(lines)


def problems() -> list[str]:
    """Disagreements between this table and the fixture files (every fixture listed, gpu-only marks equal)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from build import fixtures

    found = fixtures()
    issues = [f"{n}: fixture without an expected verdict" for n in found if n not in EXPECTED]
    issues += [f"{n}: expected verdict without a fixture" for n in EXPECTED if n not in found]
    for name in set(found) & set(EXPECTED):
        if found[name].gpu_only != EXPECTED[name].gpu_only:
            issues.append(f"{name}: gpu-only differs between the fixture and expected.py")
        if name in OTHER_NOTEBOOKS:  # their items are checked against the master notebook by test_adversarial
            continue
        also = [EXPECTED[name].gpu_also[1]] if EXPECTED[name].gpu_also else []
        for points in (EXPECTED[name].cpu, EXPECTED[name].gpu, *also):
            if set(points) != set(ITEMS) or any(v is not None and not 0 <= v <= ITEMS[k] for k, v in points.items()):
                issues.append(f"{name}: points outside the items' ranges")
    return sorted(issues)


if __name__ == "__main__":
    print(markdown_table())
    for issue in problems():
        print("PROBLEM:", issue)
