"""No student Python at build time: every kernel body is vetted from its syntax before the builder defines or
compiles it (grader.kernel_build.kernel_vet), recorded specialisations are plain data, the judge recomputes each built
file's digest, and bans on library calls are checked on the compiled kernel (grader.judge.ir_rules)."""

import glob
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from grader.intake.layout import REPO
from grader.judge import ir_rules
from grader.kernel_build import build_kernels, built_index
from grader.replay import gpu_replay as replay
from grader.run import execute
from grader.wall import sandbox

SM90 = {"backend": "cuda", "arch": 90, "warp_size": 32}
HEAD = "import math\nimport triton\nimport triton.language as tl\n"


def _kernel(body: str, name: str = "k") -> str:
    return HEAD + f"\n@triton.jit\ndef {name}(x_ptr, BLOCK: tl.constexpr):\n" + textwrap.indent(body, "    ") + "\n"


def _refused(source: str, name: str = "k") -> str | None:
    return build_kernels.read_definitions([source]).refused.get(name)


@pytest.mark.parametrize("path", sorted(glob.glob(str(REPO / "solutions" / "*" / "*.ipynb"))
                                        + glob.glob(str(REPO / "week*" / "*.ipynb"))),
                         ids=lambda p: "/".join(Path(p).parts[-3:]))
def test_every_kernel_of_the_course_passes_the_vetting(path):
    cells = [c.source for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    assert build_kernels.read_definitions(cells).refused == {}


@pytest.mark.parametrize("body, why", [
    ("tl.core.builtins.exec('x = 1')", "line 7: calls tl.core.builtins.exec, which is not a Triton builtin"),
    ("tl.core.builtins.__import__('os')", "calls tl.core.builtins.__import__, which is not a Triton builtin"),
    ('tl.core.builtins.__import__("triton").language.dot(x_ptr, x_ptr)', "calls tl.core.builtins.__import__"),
    ("(tl if 1 else tl).dot(x_ptr, x_ptr)", "uses the module tl as a value"),
    ("m = tl\nm.dot(x_ptr, x_ptr)", "uses the module tl as a value"),
    ("f = tl.dot\nf(x_ptr, x_ptr)", "calls f, a local value"),
    ("(tl.dot,)[0](x_ptr, x_ptr)", "calls the result of (tl.dot,)[0]"),
    ("getattr(tl, 'dot')(x_ptr, x_ptr)", "calls the result of getattr(tl, 'dot')"),
    ("math.floor(2.5)", "calls math.floor, which is not a Triton builtin"),
    ("triton.runtime.cache.os.mkdir('/tmp/x')", "only triton.language may be used inside a kernel"),
    ("triton.cdiv(4, 2)", "calls triton.cdiv"),
    ("tl.sum.fn(x_ptr)", "calls tl.sum.fn, which is not a Triton builtin"),
    ("x_ptr.__class__", "names starting with _"),
    ("__builtins__", "uses __builtins__, which is neither"),
    ("os.system('true')", "uses os, which is neither"),
    ("(lambda: 1)()", "calls the result of lambda"),
    ("global g", "global inside a kernel"),
    ("def inner():\n    pass", "a nested function inside a kernel"),
    ("x_ptr.split('/')[0].join([])", ".join is not a method of Triton's tensors"),
    ("tl.float32.to_ir(None)", "calls tl.float32.to_ir, which is not a Triton builtin"),
    ("tl.dot = None", "only local names may be assigned"),
])
def test_a_kernel_that_reaches_python_is_refused_with_the_call_and_line(body, why):
    refused = _refused(_kernel(body))
    assert refused is not None and why in refused, refused


def test_triton_s_own_language_passes():
    body = textwrap.dedent("""
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < BLOCK, other=0.0).to(tl.float32)
        y = tl.sum(x * x, axis=0) + tl.extra.libdevice.pow(x, 2.0) + libdevice.exp(x) + math.pi
        acc = tl.full((BLOCK,), 0.0, tl.float32)
        for i in tl.static_range(2):
            acc += tl.maximum(x, y, propagate_nan=tl.PropagateNan.ALL)
        for i in tl.range(0, 4, num_stages=2):
            acc = acc.to(tl.float16).to(tl.float32) + min(1, 2) + max(BLOCK, 1) + int(2.0) + float(len((1, 2)))
        tl.static_assert(BLOCK > 0)
        tl.store(x_ptr + offs, helper(acc), mask=offs < BLOCK)
        raise NotImplementedError(os.system("never run: the code generator refuses a raise unevaluated"))
    """)
    source = _kernel(body).replace(HEAD, HEAD + "from triton.language.extra import libdevice\n\n"
                                   "@triton.jit\ndef helper(v):\n    return v * SCALE\n\nSCALE = tl.constexpr(2.0)\n")
    assert build_kernels.read_definitions([source]).refused == {}


def test_a_kernel_calling_a_refused_helper_is_refused():
    source = HEAD + textwrap.dedent("""
        @triton.jit
        def helper(v):
            return tl.core.builtins.exec("x = 1")

        @triton.jit
        def k(x_ptr):
            helper(x_ptr)
    """)
    assert "it calls kernel helper, which cannot be built" in _refused(source)


def test_the_functional_forms_of_triton_s_tutorials_are_kernels_of_their_function(tmp_path):
    source = HEAD + textwrap.dedent("""
        def _matmul_kernel(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), step(tl.zeros((BLOCK,), dtype=tl.float32)))

        def _step(v):
            return v + 1.0

        step = triton.jit(_step, noinline=False)
        matmul_kernel = triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])(
            triton.heuristics(values={"EVEN": lambda args: True})(triton.jit(_matmul_kernel)))

        def _other(x_ptr):
            pass

        other = triton.jit(_other, launch_metadata="print")
    """)
    definitions = build_kernels.read_definitions([source])
    assert set(definitions.jit_options) == {"_matmul_kernel", "_step"} and definitions.jit_options["_step"] == {
        "noinline": False}
    assert definitions.kernel_names == {"step": "_step", "matmul_kernel": "_matmul_kernel"}
    assert "the grader's builder does not take" in definitions.refused["_other"]
    assert build_kernels.kernel_problem(definitions, "_matmul_kernel") is None
    launch = {"kernel": "_matmul_kernel", "signature": {"x_ptr": "*fp32", "BLOCK": "constexpr"},
              "constexprs": [[[1], {"int": 16}]], "attrs": [], "options": {"num_warps": 4}, "target": SM90}
    request = tmp_path / "request.json"
    request.write_text(json.dumps(_request(tmp_path, source, launch)))
    # The builder's own process (as in the sandbox): Triton's library kernels (tl.zeros) compiled, not interpreted.
    subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(request)], cwd=REPO, check=True,
                   env={**os.environ, "TRITON_INTERPRET": "0"})
    [entry] = json.loads((tmp_path / "built" / "index.json").read_text()).values()
    assert entry.get("kernel") == "_matmul_kernel", entry


def test_a_kernel_bound_in_the_branches_of_a_top_level_if_is_read_from_every_branch():
    source = HEAD + textwrap.dedent("""
        def _matmul_kernel(x_ptr, BLOCK: tl.constexpr):
            tl.store(x_ptr + tl.arange(0, BLOCK), tl.zeros((BLOCK,), dtype=tl.float32))

        def _payload_kernel(x_ptr):
            os.system("id")

        if DEVICE.interpret:
            matmul_kernel = triton.jit(_matmul_kernel)
            BLOCK = 32
        elif FAST:
            matmul_kernel = triton.heuristics(values={"EVEN": lambda args: True})(triton.jit(_matmul_kernel))
        else:
            matmul_kernel = triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])(
                triton.jit(_matmul_kernel))
            spare = triton.jit(_payload_kernel)
    """)
    definitions = build_kernels.read_definitions([source])
    assert definitions.kernel_names == {"matmul_kernel": "_matmul_kernel", "spare": "_payload_kernel"}
    assert build_kernels.kernel_problem(definitions, "_matmul_kernel") is None
    # every branch is vetted, whichever ran
    assert "os.system" in build_kernels.kernel_problem(definitions, "_payload_kernel")
    assert "BLOCK" not in definitions.values  # a branch's constant is not one of the notebook's


def test_a_kernel_bound_twice_in_branches_with_different_options_is_refused():
    source = HEAD + textwrap.dedent("""
        def _k(x_ptr):
            pass

        if DEVICE.interpret:
            k = triton.jit(_k, debug=True)
        else:
            k = triton.jit(_k)
    """)
    definitions = build_kernels.read_definitions([source])
    assert "twice with different options" in build_kernels.kernel_problem(definitions, "_k")


def _notebook(folder: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    path = folder / "notebook.ipynb"
    nbformat.write(nb, str(path))
    return path


def _request(folder: Path, source: str, *launches: dict) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    exported = folder / "export.json"
    exported.write_text(json.dumps({"kernels": {"s": {"calls": {
        f"c{i}": {"plan": {"launches": [launch]}} for i, launch in enumerate(launches)}}}}))
    return {"notebook": str(_notebook(folder, source)), "export": str(exported), "target": SM90,
            "out": str(folder / "built")}


def _build(folder: Path, source: str, *launches: dict) -> dict:
    return build_kernels.build(_request(folder, source, *launches))


def _launch(name: str = "k") -> dict:
    return {"kernel": name, "signature": {"x_ptr": "*fp32", "BLOCK": "constexpr"}, "constexprs": [[[1], {"int": 16}]],
            "attrs": [], "options": {"num_warps": 4}, "target": SM90}


def _payloads(marker: str) -> list[tuple[str, str]]:
    """(kernel name, source): each would create ``marker``-<name> if the code generator ran it."""
    return [
        ("uses_exec", f"tl.core.builtins.exec(\"open('{marker}-uses_exec', 'w').close()\")"),
        ("uses_import", f"tl.core.builtins.__import__('os').mkdir('{marker}-uses_import')"),
        ("uses_module_function", f"tl.core.inspect.os.mkdir('{marker}-uses_module_function')"),
    ]


UNVETTED_COMPILE = """
import json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction
from course.compiler import compile_triton

path, name, target = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
namespace = {}
exec(compile(open(path).read(), path, "exec"), namespace)
kernel = JITFunction(namespace[name])  # compiled, whatever TRITON_INTERPRET says (as the builder does)
compile_triton(ASTSource(kernel, {"x_ptr": "*fp32", "BLOCK": "constexpr"}, {(1,): 16}), GPUTarget(**target))
"""


def test_each_payload_runs_when_its_kernel_is_compiled_unvetted(tmp_path):
    """The control: Triton's code generator does run each payload (so the tests below can fail). Each compile runs
    in a process of its own: an interpreted launch earlier in this one leaves Triton's language patched."""
    marker = str(tmp_path / "ran")
    for name, body in _payloads(marker):
        path = tmp_path / f"{name}.py"
        source = _kernel(body + "\ntl.store(x_ptr + tl.arange(0, BLOCK), 1.0)", name)
        path.write_text(source.replace("@triton.jit\n", ""))
        subprocess.run([sys.executable, "-c", UNVETTED_COMPILE, str(path), name, json.dumps(SM90)], cwd=tmp_path,
                       check=True, env={**os.environ, "TRITON_INTERPRET": "0"})
        assert Path(f"{marker}-{name}").exists(), name


def test_the_builder_runs_no_payload_of_a_kernel_body(tmp_path):
    marker = str(tmp_path / "ran")
    payloads = _payloads(marker)
    source = "\n".join(_kernel(body + "\ntl.store(x_ptr + tl.arange(0, BLOCK), 1.0)", name).replace(HEAD, "")
                       for name, body in payloads)
    index = _build(tmp_path / "b", HEAD + source, *(_launch(name) for name, _ in payloads))
    assert not list(tmp_path.glob("ran-*"))
    errors = {entry.get("error", "") for entry in index.values()}
    assert all(any(f"kernel {name}" in e and "cannot be built" in e for e in errors) for name, _ in payloads), errors
    assert any("calls tl.core.builtins.exec, which is not a Triton builtin" in e for e in errors)
    assert not list((tmp_path / "b" / "built").glob("*.ttgir"))


@pytest.mark.sandbox
def test_the_sandboxed_builder_runs_no_payload_and_binds_no_gpu(tmp_path, monkeypatch):
    payloads = _payloads(str(tmp_path / "work" / "built" / "ran"))  # the builder's output folder: writable there
    source = HEAD + "\n".join(_kernel(body, name).replace(HEAD, "") for name, body in payloads)
    request = _request(tmp_path / "in", source, *(_launch(name) for name, _ in payloads))
    asked = []
    real_run = sandbox.run
    monkeypatch.setattr(sandbox, "run", lambda *a, **kw: asked.append(kw["gpu"]) or real_run(*a, **kw))
    job = execute.Job(notebook=request["notebook"], workdir=str(tmp_path / "work"), device="gpu", gpu="0",
                      log=str(tmp_path / "build.log"))
    outcome = execute.build(job, Path(request["notebook"]), Path(request["export"]), SM90, tmp_path / "built")
    assert outcome.status == "ok", (tmp_path / "build.log").read_text()[-2000:]
    assert asked == [None]  # no GPU device node is bound for the build
    assert not [p for p in tmp_path.rglob("ran-*")]
    index = json.loads((tmp_path / "built" / "index.json").read_text())
    assert len(index) == 3 and all("cannot be built" in entry["error"] for entry in index.values())


@pytest.mark.parametrize("edit, why", [
    ({"signature": {"x_ptr": "*tensordesc<fp16[16],__import__('os').mkdir('MARK')>", "BLOCK": "constexpr"}},
     "cannot replay"),
    ({"signature": {"y_ptr": "*fp32", "BLOCK": "constexpr"}}, "does not name the parameters"),
    ({"constexprs": [[[1], {"str": "x" * 1000}]]}, "is not plain data"),
    ({"constexprs": [[[1], {"dtype": "fp32"}]]}, None),
    ({"options": {"num_warps": 4, "extern_libs": {"libdevice": "/tmp/evil.bc"}}}, "not the plain options"),
    ({"attrs": [[[0], [["tt.divisibility", "16"]]]]}, "attributes are malformed"),
])
def test_a_recorded_specialisation_is_plain_data_or_refused(tmp_path, edit, why):
    source = _kernel("tl.store(x_ptr + tl.arange(0, 16), 1.0)")
    launch = {**_launch(), **edit}
    launch["signature"] = {k: v.replace("MARK", str(tmp_path / "ran")) for k, v in launch["signature"].items()}
    [entry] = _build(tmp_path, source, launch).values()
    if why is None:
        assert "error" not in entry, entry
    else:
        assert why in entry.get("error", ""), entry
    assert not (tmp_path / "ran").exists()


def test_the_judge_refuses_a_built_file_that_differs_from_its_index_entry(tmp_path):
    source = _kernel("tl.store(x_ptr + tl.arange(0, BLOCK), 1.0)")
    [(key, entry)] = _build(tmp_path, source, _launch()).items()
    built = tmp_path / "built"
    assert built_index.built_ttgir(built, entry).startswith("#")
    file = built / entry["file"]
    file.write_text(file.read_text().replace("1.000000e+00", "2.000000e+00"))
    with pytest.raises(ValueError, match="changed after it was compiled"):
        built_index.built_ttgir(built, entry)
    (built / "link.ttgir").symlink_to(file)
    for name in ("link.ttgir", "../../absent.ttgir"):
        with pytest.raises(ValueError, match="missing or malformed"):
            built_index.built_ttgir(built, {**entry, "file": name})


RANK1 = "acc += tl.load(x_ptr + offs)[:, None] * tl.load(x_ptr + offs)[None, :]"
DOT = "acc = tl.dot(tl.load(x_ptr + offs[:, None] * 16 + offs[None, :]), " \
      "tl.load(x_ptr + offs[:, None] * 16 + offs[None, :]), acc)"


@pytest.mark.parametrize("line, banned", [(RANK1, False), (DOT, True)])
def test_a_ban_is_checked_on_the_compiled_kernel(tmp_path, line, banned):
    body = f"offs = tl.arange(0, 16)\nacc = tl.full((16, 16), 0.0, tl.float32)\n{line}\n" \
           "tl.device_assert(acc == acc, 'tt.dot')\ntl.store(x_ptr + offs[:, None] * 16 + offs[None, :], acc)"
    [(key, entry)] = _build(tmp_path, _kernel(body), _launch()).items()
    text = built_index.built_ttgir(tmp_path / "built", entry)
    problem = ir_rules.problem(text, ["tl.dot"], "kernel k")
    assert (problem is not None) == banned, problem
    plan = {"launches": [_launch()]}
    assert (ir_rules.plan_problem(plan, {key: text}, {}, ["tl.dot"]) is not None) == banned
    assert ir_rules.plan_problem(plan, {}, {key: "kernel k did not compile"}, ["tl.dot"]).endswith("did not compile")


def test_matrix_instructions_in_inline_assembly_break_a_ban_on_tl_dot():
    ttgir = '%y = tt.elementwise_inline_asm "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32 ..." {pure = true}'
    assert "inline assembly" in ir_rules.problem(ttgir, ["tl.dot"])
    assert ir_rules.problem('%y = tt.elementwise_inline_asm "mov.b32 $0, $1;" {pure = true}', ["tl.dot"]) is None


CPU_CELL = HEAD + '''import torch


@triton.jit
def tile_kernel(x_ptr, out_ptr, n, USE_DOT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tile = tl.load(x_ptr + offs[:, None] * BLOCK + offs[None, :])
    if USE_DOT:
        acc = tl.dot(tile, tile, input_precision="ieee")
    else:
        acc = tl.sum(tile[:, :, None] * tile[None, :, :], axis=1)
    tl.store(out_ptr + offs[:, None] * BLOCK + offs[None, :], acc)


def square(x, use_dot):
    out = torch.empty_like(x)
    tile_kernel[(1,)](x, out, x.numel(), USE_DOT=use_dot, BLOCK=16, num_warps=4)
    return out
'''


@pytest.mark.parametrize("use_dot", [True, False])
def test_a_cpu_run_s_kernels_are_built_for_a_nominal_gpu_and_checked_on_their_ir(tmp_path, use_dot):
    """The CPU path: an interpreted launch records the specialisation a GPU launch would compile; the builder
    compiles it for NOMINAL_TARGET, and the ban is read from the TTGIR (what the CPU judge does)."""
    import importlib.util

    import torch

    from course.recorder import plan, plan_format

    path = tmp_path / "cpu_cell.py"
    path.write_text(CPU_CELL)
    module_spec = importlib.util.spec_from_file_location("cpu_cell", path)
    cell = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(cell)
    _, recorded = plan.record_call(lambda x: cell.square(x, use_dot), (torch.randn(16, 16),))
    [launch] = recorded["launches"]
    assert launch["signature"] == {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32", "USE_DOT": "constexpr",
                                   "BLOCK": "constexpr"} and launch["target"] == plan_format.NOMINAL_TARGET
    request = {**_request(tmp_path, CPU_CELL, launch), "target": plan_format.NOMINAL_TARGET}
    (tmp_path / "request.json").write_text(json.dumps(request))
    subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(tmp_path / "request.json")],
                   cwd=REPO, check=True, env={**os.environ, "TRITON_INTERPRET": "0"})
    texts, errors = ir_rules.read_built(tmp_path / "built")
    assert not errors and len(texts) == 1
    problem = ir_rules.plan_problem(recorded, texts, errors, ["tl.dot"])
    # tl.sum of a broadcast product compiles to tt.dot too: without tl.dot means without tensor-core products
    assert problem is not None and "contains tt.dot" in problem
    assert ir_rules.plan_problem(recorded, texts, errors, []) is None


def test_an_answer_cell_defines_the_kernel_it_wraps_with_triton_jit():
    from grader.judge import provenance

    cells = [nbformat.v4.new_code_cell(HEAD + "def _k(x_ptr):\n    pass\n\nk = triton.jit(_k)\n"),
             nbformat.v4.new_code_cell("def _other(x_ptr):\n    pass\n\nother = triton.jit(_other)\n")]
    cells[0].metadata["nbgrader"] = {"grade_id": "answer"}
    allowed = provenance.allowed_kernels(cells, ("answer",))
    assert allowed.triton == {"_k"}
    assert provenance.foreign_launch({"launches": [{"kernel": "_k"}]}, allowed) is None
    assert "not defined in the answer cell" in provenance.foreign_launch({"launches": [{"kernel": "_other"}]}, allowed)


def test_every_banned_call_of_the_course_has_its_compiled_forms():
    from course import spec as specs

    banned = {call for spec in specs.all_specs() for call in spec.forbidden_calls}
    assert banned and all(ir_rules.OPS.get("tl." + call.removeprefix("triton.language.").removeprefix("tl."))
                          for call in banned), banned


FUNCTIONAL_CELL = HEAD + '''import torch


def _scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = (offs < n) | EVEN
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


scale_kernel = triton.autotune(configs=[triton.Config({"BLOCK": 128}, num_warps=4)], key=["n"])(
    triton.heuristics(values={"EVEN": lambda args: args["n"] % args["BLOCK"] == 0})(triton.jit(_scale)))


def scale(x):
    out = torch.empty_like(x)
    scale_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
    return out
'''


@pytest.mark.gpu
def test_a_kernel_in_functional_form_records_builds_and_replays_on_a_gpu(tmp_path):
    import importlib.util

    import torch

    from course.recorder import plan

    path = tmp_path / "functional_cell.py"
    path.write_text(FUNCTIONAL_CELL)
    module_spec = importlib.util.spec_from_file_location("functional_cell", path)
    cell = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(cell)
    x = torch.randn(1000, device="cuda")
    cell.scale(x)  # the autotuner's first call
    _, recorded = plan.record_call(cell.scale, (x,))
    assert recorded["problems"] == [] and recorded["launches"][0]["kernel"] == "_scale"
    [launch] = recorded["launches"]
    request = {**_request(tmp_path, FUNCTIONAL_CELL, launch), "target": launch["target"]}
    (tmp_path / "request.json").write_text(json.dumps(request))
    subprocess.run([sys.executable, "-m", "grader.kernel_build.build_kernels", str(tmp_path / "request.json")],
                   cwd=REPO, check=True, env={**os.environ, "TRITON_INTERPRET": "0"})
    kernels = replay.load_kernels(tmp_path / "built")
    assert not kernels.errors, kernels.errors
    fresh = torch.randn(1000, device="cuda")
    out = replay.launch(replay.prepare(recorded, (fresh,), kernels, torch.float32, (1000,), 2**26))
    torch.cuda.synchronize()
    torch.testing.assert_close(out, fresh * 3)
