"""The builder stops at TTGIR and a trusted stage compiles it into the judge's Triton cache
(grader.kernel_build.compile_ttgir): Week 1 Day 7's kernel as the solution launches it on an H100, built and compiled
for
sm_90 on this CPU. The judge's load (tests.cached_judge, a fresh process) finds every kernel there and compiles
nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from triton.backends.compiler import GPUTarget

from course.recorder.plan_format import ttgir_digest
from grader.intake.layout import REPO, SOLUTIONS
from grader.kernel_build import build_kernels, built_index, compile_ttgir
from grader.replay import gpu_replay as replay
from grader.score import results

NOTEBOOK = SOLUTIONS / "week1" / "day7_fast_matmul.ipynb"
SM90 = {"backend": "cuda", "arch": 90, "warp_size": 32}
NAMES = ["a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm",
         "stride_cn", "BLOCK_M", "BLOCK_N", "BLOCK_K"]
BLOCKS = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}


def _launch(m: int, n: int, k: int) -> dict:
    """matmul_kernel as the solution launches it on a GPU for row-major (m, k) @ (k, n), as course.recorder.plan
    records it: integers of 1 specialised away, the others and the pointers marked divisible by 16 where they are."""
    values = {"M": m, "N": n, "K": k, "stride_am": k, "stride_ak": 1, "stride_bk": n, "stride_bn": 1, "stride_cm": n,
              "stride_cn": 1}
    signature, constexprs, attrs = {}, [], []
    for index, name in enumerate(NAMES):
        value = BLOCKS.get(name, values.get(name, 0))
        if name.endswith("_ptr"):
            signature[name] = "*fp32"
            attrs.append([[index], [["tt.divisibility", 16]]])
        elif name in BLOCKS or value == 1:
            signature[name] = "constexpr"
            constexprs.append([[index], {"int": value}])
        else:
            signature[name] = "i32"
            if value % 16 == 0:
                attrs.append([[index], [["tt.divisibility", 16]]])
    return {"kernel": "matmul_kernel", "signature": signature, "constexprs": constexprs, "attrs": attrs,
            "options": {"num_warps": 4, "num_stages": 3}, "target": SM90}


LAUNCHES = [_launch(512, 512, 512), _launch(100, 70, 90)]
KEYS = sorted(build_kernels.launch_key(launch) for launch in LAUNCHES)


def _files(folder: Path) -> dict[str, float]:
    return {str(p.relative_to(folder)): p.stat().st_mtime for p in folder.rglob("*")} if folder.exists() else {}


def _compiling_env(cache: Path) -> dict[str, str]:
    """A process that compiles Triton kernels from source, as the sandboxed builder does: this one interprets Triton
    (course chose the CPU), which the code generator cannot follow."""
    return {**os.environ, "TRITON_INTERPRET": "0", "TRITON_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The builder's output for both launches, made with a Triton cache of its own (``built.parent / "cache"``)."""
    folder = tmp_path_factory.mktemp("w1d7")
    exported = folder / "export.json"
    exported.write_text(json.dumps({"kernels": {"w1d7.matmul_fp32": {"calls": {
        f"c{i}": {"plan": {"launches": [launch]}} for i, launch in enumerate(LAUNCHES)}}}}))
    request = folder / "build.json"
    request.write_text(json.dumps({"notebook": str(NOTEBOOK), "export": str(exported), "target": SM90,
                                   "out": str(folder / "built")}))
    subprocess.run([sys.executable, "-P", "-m", "grader.kernel_build.build_kernels", str(request)], cwd=folder,
                   check=True, env=_compiling_env(folder / "cache"))
    index = json.loads((folder / "built" / "index.json").read_text())
    assert sorted(index) == KEYS and all("error" not in entry for entry in index.values()), index
    return folder / "built"


@pytest.fixture(scope="module")
def compiled(built, tmp_path_factory) -> tuple[Path, Path, object]:
    """(built folder, the judge cache compile_built filled for sm_90, its outcome)."""
    folder = tmp_path_factory.mktemp("compiled")
    shutil.copytree(built, folder / "built")
    outcome = compile_ttgir.compile_built(folder / "built", SM90, folder / "cache", folder / "compile.log", 300)
    return folder / "built", folder / "cache", outcome


def _index(built: Path) -> dict:
    return json.loads((built / "index.json").read_text())


def _judge_load(tmp_path: Path, built: Path, cache: Path, **extra) -> dict:
    request = tmp_path / "load.json"
    request.write_text(json.dumps({"built": str(built), "cache": str(cache), **extra}))
    done = subprocess.run([sys.executable, "-P", "-m", "tests.cached_judge", str(request)], cwd=tmp_path,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


FULL_COMPILE = """
import json, sys
import nbformat
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from course.compiler import compile_triton
from grader.kernel_build import build_kernels

notebook, src, launches = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
cells = [c.source for c in nbformat.read(notebook, as_version=4).cells if c.cell_type == "code"]
kernel = build_kernels.kernel_definitions(cells, build_kernels.Path(src))[0]["matmul_kernel"]
found = {}
for launch in launches:
    signature, constexprs, attrs, options = build_kernels.specialisation(launch, kernel)
    source = ASTSource(kernel, signature, constexprs, attrs)
    full = compile_triton(source, GPUTarget(**launch["target"]), options)
    again = compile_triton(source, GPUTarget(**launch["target"]), options, until="ttgir")  # a cache hit
    found[build_kernels.launch_key(launch)] = {"ttgir": full.asm["ttgir"], "cubin": len(full.asm["cubin"]),
                                               "again": again}
print(json.dumps(found))
"""


def test_the_builder_never_imports_torch(built, tmp_path):
    """The builder reads plans through plan_format, which needs no torch: importing it cost a build 3 s of a core."""
    request = json.loads((built.parent / "build.json").read_text())
    (tmp_path / "build.json").write_text(json.dumps({**request, "out": str(tmp_path / "built")}))
    probe = ("import sys; from grader.kernel_build import build_kernels; code = build_kernels.main(['build.json']); "
             "print('torch imported:', 'torch' in sys.modules); sys.exit(code)")
    done = subprocess.run([sys.executable, "-P", "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          env=_compiling_env(built.parent / "cache"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "built" / "index.json").is_file()
    assert done.stdout.splitlines()[-1] == "torch imported: False"


def test_the_builder_writes_the_ttgir_of_a_full_compile_and_compiles_no_further(built, tmp_path):
    stored = [p.name for p in (built.parent / "cache").rglob("*") if p.is_file()]
    assert any(name.endswith(".ttgir") for name in stored)
    assert not [name for name in stored if name.endswith((".llir", ".ptx", ".cubin")) or name.startswith("__grp__")]
    # The whole pipeline, on kernels defined from the same files (the same source locations in the TTGIR).
    done = subprocess.run([sys.executable, "-P", "-c", FULL_COMPILE, str(NOTEBOOK), str(built / "src"),
                           json.dumps(LAUNCHES)], cwd=tmp_path, capture_output=True, text=True, check=True,
                          env=_compiling_env(tmp_path / "full"))
    full = json.loads(done.stdout.splitlines()[-1])
    index = _index(built)
    assert sorted(full) == KEYS
    for key, compiled in full.items():
        assert compiled["cubin"] > 0
        assert (built / index[key]["file"]).read_text() == compiled["ttgir"] == compiled["again"]
        assert index[key]["digest"] == ttgir_digest(compiled["ttgir"])


def test_compile_built_fills_the_judge_cache_and_a_fresh_judge_compiles_nothing(compiled, tmp_path):
    built, cache, outcome = compiled
    assert outcome.status == results.OK and outcome.timings["compile"] > 0, outcome
    assert results.read_json(built / built_index.COMPILED) == {"target": SM90, "errors": {}}
    assert len(list(cache.rglob("__grp__*.json"))) == len(KEYS) and len(list(cache.rglob("*.cubin"))) == len(KEYS)
    assert not list(cache.rglob("*.llir")) and not list(cache.rglob("*.ptx"))  # the binary alone is kept
    before = _files(cache)
    found = _judge_load(tmp_path, built, cache, target=SM90, forbid_compiling=True)
    assert found["errors"] == {} and sorted(found["loaded"]) == KEYS and found["compiled_here"] == []
    assert found["digests"] == {key: entry["digest"] for key, entry in _index(built).items()}
    assert _files(cache) == before  # not a file written or touched


def test_without_the_compile_stage_the_same_load_would_have_compiled(compiled, tmp_path):
    """The control: the guard in tests.cached_judge does stop a compile, so the test above can fail."""
    built, _, _ = compiled
    found = _judge_load(tmp_path, built, tmp_path / "empty", target=SM90, forbid_compiling=True)
    assert found["loaded"] == [] and sorted(found["errors"]) == KEYS
    assert all("a stage of Triton's compiler ran" in message for message in found["errors"].values())


def test_a_kernel_missing_from_the_cache_is_compiled_by_the_judge(compiled, tmp_path):
    built, _, _ = compiled
    kernels = replay.load_kernels(built, target=GPUTarget(**SM90), cache=tmp_path / "empty")
    assert kernels.errors == {} and kernels.loaded == [] and sorted(kernels.compiled_here) == KEYS
    assert kernels.compiled[KEYS[0]].asm["cubin"]


def test_a_ttgir_changed_after_its_build_is_neither_compiled_nor_loaded(built, tmp_path):
    shutil.copytree(built, tmp_path / "built")
    changed, kept = KEYS
    file = tmp_path / "built" / _index(built)[changed]["file"]
    file.write_text(file.read_text().replace("tt.dot", "tt.dot ", 1))
    outcome = compile_ttgir.compile_built(tmp_path / "built", SM90, tmp_path / "cache", tmp_path / "log", 300)
    assert outcome.status == results.OK
    assert results.read_json(tmp_path / "built" / built_index.COMPILED)["errors"] == {}
    assert len(list((tmp_path / "cache").rglob("__grp__*.json"))) == 1
    kernels = replay.load_kernels(tmp_path / "built", target=GPUTarget(**SM90), cache=tmp_path / "cache")
    assert kernels.errors == {changed: "the build of kernel matmul_kernel was changed after it was compiled"}
    assert kernels.loaded == [kept] and kernels.compiled_here == []


def _refused_by_the_compiler(built: Path, folder: Path) -> tuple[Path, str, str]:
    """A copy of ``built`` where one kernel's TTGIR (its digest recomputed) is one the compiler refuses."""
    shutil.copytree(built, folder)
    refused, kept = KEYS
    index = _index(folder)
    file = folder / index[refused]["file"]
    text = file.read_text().replace('"ttg.num-warps" = 4', '"ttg.num-warps" = 3', 1)
    file.write_text(text)
    index[refused]["digest"] = ttgir_digest(text)
    (folder / "index.json").write_text(json.dumps(index))
    return folder, refused, kept


def test_a_ttgir_the_compiler_refuses_is_that_kernel_s_error_where_the_judge_reports_it(built, tmp_path):
    folder, refused, kept = _refused_by_the_compiler(built, tmp_path / "built")
    outcome = compile_ttgir.compile_built(folder, SM90, tmp_path / "cache", tmp_path / "log", 300)
    assert outcome.status == results.OK
    errors = results.read_json(folder / built_index.COMPILED)["errors"]
    assert list(errors) == [refused]
    assert errors[refused].startswith("the judge could not compile kernel matmul_kernel: ")
    found = _judge_load(tmp_path, folder, tmp_path / "cache", target=SM90, forbid_compiling=True)
    assert found["errors"] == errors and found["loaded"] == [kept] and found["compiled_here"] == []


SITECUSTOMIZE = """
import os
import triton

_compile = triton.compile


def _aborts_on_one(src, *args, **kwargs):
    if os.environ["ABORT_ON"] in str(src):
        os.abort()
    return _compile(src, *args, **kwargs)


triton.compile = _aborts_on_one
"""


def test_a_compiler_that_aborts_costs_only_the_kernel_it_was_compiling(built, tmp_path, monkeypatch):
    shutil.copytree(built, tmp_path / "built")
    aborted, kept = KEYS
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "hooks"))
    monkeypatch.setenv("ABORT_ON", aborted)
    outcome = compile_ttgir.compile_built(tmp_path / "built", SM90, tmp_path / "cache", tmp_path / "log", 300)
    assert outcome.status == results.OK, outcome
    errors = results.read_json(tmp_path / "built" / built_index.COMPILED)["errors"]
    assert errors == {aborted: "the judge could not compile kernel matmul_kernel: the compiler stopped (exit code -6)"}
    kernels = replay.load_kernels(tmp_path / "built", target=GPUTarget(**SM90), cache=tmp_path / "cache")
    assert kernels.loaded == [kept] and kernels.errors == errors


def test_a_compile_stage_past_its_limit_is_a_grader_error(built, tmp_path):
    shutil.copytree(built, tmp_path / "built")
    outcome = compile_ttgir.compile_built(tmp_path / "built", SM90, tmp_path / "cache", tmp_path / "log", 0.5)
    assert outcome.status == results.GRADER_ERROR
    assert outcome.message == "compiling the kernels ran past its 0.5 s limit"
    assert outcome.message in (tmp_path / "log").read_text()


def test_a_record_the_builder_left_is_never_taken_for_the_stage_s(tmp_path):
    (tmp_path / "built").mkdir()
    (tmp_path / "built" / "index.json").write_text("{not json")
    forged = tmp_path / "built" / built_index.COMPILED
    forged.write_text(json.dumps({"errors": {KEYS[0]: "the judge could not compile kernel matmul_kernel: forged"}}))
    assert built_index.compiled_errors(tmp_path / "built") != {}
    outcome = compile_ttgir.compile_built(tmp_path / "built", SM90, tmp_path / "cache", tmp_path / "log", 60)
    assert outcome.status == results.GRADER_ERROR and "JSONDecodeError" in outcome.message
    assert not forged.exists() and built_index.compiled_errors(tmp_path / "built") == {}
